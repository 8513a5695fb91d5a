"""Before/after fixtures of every rewrite rule, read by one loader (test_rule_fixtures.py).

Each fixture names its rule, a plan before and the plan the rule must produce. Plans are
built over two small memory tables with short helpers, so each fixture reads like the
before/after example in its rule's docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
from planner_reference import memory_scan

from semray.operators import (
    ExtractField,
    Filter,
    Join,
    Limit,
    NamedExpr,
    Node,
    Project,
    Scan,
    SemAgg,
    SemClassify,
    SemCode,
    SemExtract,
    SemFilter,
    SemJoin,
    SemMap,
    SemSearch,
    SemTopK,
    Union,
)
from semray.planner import rules
from semray.planner.rules import RuleContext

TABLES = {
    "reviews": pa.table(
        {
            "review": ["great phone", "late delivery", "refund please", "ok"],
            "rating": [5, 2, 1, 3],
            "product": ["p1", "p2", "p1", "p3"],
        }
    ),
    "products": pa.table({"name": ["p1", "p2", "p3"], "blurb": ["a phone", "a case", "a charger"]}),
}


def reviews(columns: tuple[str, ...] | None = None) -> Scan:
    scan = memory_scan("reviews", TABLES["reviews"])
    return scan if columns is None else Scan(source=scan.source, source_schema=scan.source_schema, columns=columns)


def products(columns: tuple[str, ...] | None = None) -> Scan:
    scan = memory_scan("products", TABLES["products"])
    return scan if columns is None else Scan(source=scan.source, source_schema=scan.source_schema, columns=columns)


def project(node: Node, *names: str) -> Project:
    return Project(input=node, exprs=tuple(NamedExpr(name=name, expr=name) for name in names))


def sentiment(node: Node) -> SemClassify:
    return SemClassify(input=node, instruction="{review}", labels=("positive", "negative"), output="sentiment")


def summary(node: Node, output: str = "summary") -> SemMap:
    return SemMap(input=node, instruction="summary of {review}", output=output)


def delivery(node: Node) -> SemFilter:
    return SemFilter(input=node, instruction="{review} mentions delivery")


def refund(node: Node) -> SemFilter:
    return SemFilter(input=node, instruction="{review} mentions a refund")


def extract(node: Node, *names: str) -> SemExtract:
    fields = tuple(ExtractField(name=name, type="int" if name == "amount" else "text") for name in names)
    return SemExtract(input=node, instruction="facts in {review}", fields=fields)


def search(node: Node, k: int = 2) -> SemSearch:
    return SemSearch(input=node, column="review", query="late delivery", k=k)


WORDS = (
    "import pandas as pd\n"
    "def transform(batch):\n"
    "    return pd.DataFrame({'words': batch['review'].str.split().str.len()})\n"
)
"""A user's function for `word_count` (the reference evaluator runs it in the engine's sandbox)."""


def word_count(node: Node) -> SemCode:
    return SemCode(
        input=node,
        instruction="the number of words of {review}",
        inputs=("review",),
        outputs=(ExtractField(name="words", type="int"),),
        code=WORDS,
    )


SELECTIVITY = {"{review} mentions delivery": 0.9, "{review} mentions a refund": 0.1}
MEASURED = RuleContext(selectivity=lambda node: SELECTIVITY.get(getattr(node, "instruction", "")))


@dataclass(frozen=True)
class Fixture:
    name: str
    rule: Callable[[Node, RuleContext], Node]
    before: Node
    after: Node
    context: RuleContext = rules.EMPTY_CONTEXT


FIXTURES = (
    Fixture(
        "filter conjunct not reading the classify's output moves below it",
        rules.push_filters_below_semantic,
        Filter(input=sentiment(reviews()), predicate="rating >= 4 AND sentiment = 'positive'"),
        Filter(input=sentiment(Filter(input=reviews(), predicate="rating >= 4")), predicate="sentiment = 'positive'"),
    ),
    Fixture(
        "filter reading the map's output stays",
        rules.push_filters_below_semantic,
        Filter(input=summary(reviews()), predicate="summary <> ''"),
        Filter(input=summary(reviews()), predicate="summary <> ''"),
    ),
    Fixture(
        "filter over a semantic join goes to the side it reads",
        rules.push_filters_below_semantic,
        Filter(
            input=SemJoin(left=reviews(), right=products(), instruction="{l.review} is about {r.blurb}"),
            predicate="rating > 2 AND name <> 'p3'",
        ),
        SemJoin(
            left=Filter(input=reviews(), predicate="rating > 2"),
            right=Filter(input=products(), predicate="name <> 'p3'"),
            instruction="{l.review} is about {r.blurb}",
        ),
    ),
    Fixture(
        "a map moves above a semantic filter that does not read it",
        rules.defer_unneeded_semantic,
        delivery(summary(reviews())),
        summary(delivery(reviews())),
    ),
    Fixture(
        "a map moves above a semi join",
        rules.defer_unneeded_semantic,
        Join(left=summary(reviews()), right=products(), kind="semi", on="l.product = r.name"),
        summary(Join(left=reviews(), right=products(), kind="semi", on="l.product = r.name")),
    ),
    Fixture(
        "trailing extraction fields move above the filter reading the first",
        rules.split_extract_fields,
        Filter(input=extract(reviews(), "amount", "sender", "subject"), predicate="amount > 100"),
        extract(Filter(input=extract(reviews(), "amount"), predicate="amount > 100"), "sender", "subject"),
    ),
    Fixture(
        "limit sinks below a map to the semantic filter",
        rules.push_limit_down,
        Limit(input=summary(delivery(reviews())), count=2),
        summary(Limit(input=delivery(reviews()), count=2)),
    ),
    Fixture(
        "limit does not cross a semantic filter",
        rules.push_limit_down,
        Limit(input=delivery(reviews()), count=2),
        Limit(input=delivery(reviews()), count=2),
    ),
    Fixture(
        "limit sinks below a code function, which keeps every row",
        rules.push_limit_down,
        Limit(input=word_count(reviews()), count=2),
        word_count(Limit(input=reviews(), count=2)),
    ),
    Fixture(
        "limit does not cross a search",
        rules.push_limit_down,
        Limit(input=search(reviews()), count=1),
        Limit(input=search(reviews()), count=1),
    ),
    Fixture(
        "stacked limits merge",
        rules.push_limit_down,
        Limit(input=Limit(input=reviews(), count=3, offset=1), count=5, offset=1),
        Limit(input=reviews(), count=2, offset=2),
    ),
    Fixture(
        "limit over a union bounds each input",
        rules.push_limit_down,
        Limit(input=Union(inputs=(reviews(), reviews())), count=2),
        Limit(input=Union(inputs=(Limit(input=reviews(), count=2), Limit(input=reviews(), count=2))), count=2),
    ),
    Fixture(
        "the more selective semantic filter runs first",
        rules.order_semantic_filters,
        refund(delivery(reviews())),
        delivery(refund(reviews())),
        MEASURED,
    ),
    Fixture(
        "no statistics, no reordering",
        rules.order_semantic_filters,
        refund(delivery(reviews())),
        refund(delivery(reviews())),
    ),
    Fixture(
        "unused classify is removed and the scan reads one column",
        rules.prune_columns,
        project(summary(sentiment(reviews())), "summary"),
        project(summary(reviews(("review",))), "summary"),
    ),
    Fixture(
        "a top-k's input keeps only the columns it and its parent read",
        rules.prune_columns,
        project(SemTopK(input=reviews(), instruction="the most urgent {review}", k=2), "review"),
        project(SemTopK(input=reviews(("review",)), instruction="the most urgent {review}", k=2), "review"),
    ),
    Fixture(
        "a search's input keeps only the column it searches and those read above",
        rules.prune_columns,
        project(search(reviews()), "review", "score"),
        project(search(reviews(("review",))), "review", "score"),
    ),
    Fixture(
        "a code function's input keeps its input columns and those read above",
        rules.prune_columns,
        project(word_count(reviews()), "rating", "words"),
        project(word_count(reviews(("review", "rating"))), "rating", "words"),
    ),
    Fixture(
        "a semantic aggregate's input keeps its keys and template columns",
        rules.prune_columns,
        SemAgg(input=reviews(), instruction="summarize {review}", keys=("product",), output="summary"),
        SemAgg(
            input=reviews(("review", "product")), instruction="summarize {review}", keys=("product",), output="summary"
        ),
    ),
    Fixture(
        "a semantic join's inputs carry only what is read above",
        rules.prune_columns,
        project(
            SemJoin(left=reviews(), right=products(), instruction="{l.review} is about {r.blurb}"), "rating", "name"
        ),
        project(
            SemJoin(
                left=reviews(("review", "rating")),
                right=products(),
                instruction="{l.review} is about {r.blurb}",
            ),
            "rating",
            "name",
        ),
    ),
    Fixture(
        "a same-sentiment join is factorized",
        rules.factorize_semantic_joins,
        SemJoin(left=reviews(), right=products(), instruction="{l.review} and {r.blurb} have the same sentiment"),
        SemJoin(
            left=reviews(),
            right=products(),
            instruction="{l.review} and {r.blurb} have the same sentiment",
            implementation="factorized",
        ),
    ),
    Fixture(
        "a comparison is not factorized",
        rules.factorize_semantic_joins,
        SemJoin(left=reviews(), right=products(), instruction="{l.review} is more positive than {r.blurb}"),
        SemJoin(left=reviews(), right=products(), instruction="{l.review} is more positive than {r.blurb}"),
    ),
    Fixture(
        "a repeated map becomes a copy of the first",
        rules.share_semantic_expressions,
        summary(Filter(input=summary(reviews()), predicate="rating > 3"), output="short"),
        Project(
            input=Filter(input=summary(reviews()), predicate="rating > 3"),
            exprs=(
                *(NamedExpr(name=n, expr=n) for n in ("review", "rating", "product", "summary")),
                NamedExpr(name="short", expr="summary"),
            ),
        ),
    ),
    Fixture(
        "a repeated semantic filter is dropped",
        rules.share_semantic_expressions,
        delivery(Filter(input=delivery(reviews()), predicate="rating > 1")),
        Filter(input=delivery(reviews()), predicate="rating > 1"),
    ),
)
