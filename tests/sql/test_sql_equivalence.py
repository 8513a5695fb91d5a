"""The same query through SQL, the Query builder and a JSON plan gives the same plan.

Plans compare structurally, expression text included; builder expressions are written
the way the SQL compiler prints them (DuckDB dialect, e.g. ``COUNT(*)``).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from semray.api import Query
from semray.operators import Node, plan_from_json, plan_to_json
from semray.sql import compile_sql

Builder = Callable[[dict[str, Query]], Query]

CASES: list[tuple[str, Builder]] = [
    (
        "SELECT product, rating FROM reviews WHERE rating >= 4 AND SEM_FILTER('{review} is positive')"
        " ORDER BY rating DESC LIMIT 10",
        lambda t: (
            t["reviews"]
            .filter("rating >= 4")
            .sem_filter("{review} is positive")
            .select("product", "rating")
            .sort("rating", descending=True)
            .limit(10)
        ),
    ),
    (
        "SELECT product, count(*) AS n, avg(rating) AS mean FROM reviews GROUP BY product",
        lambda t: t["reviews"].aggregate(by="product", n="COUNT(*)", mean="AVG(rating)"),
    ),
    (
        "SELECT * FROM reviews r JOIN products p ON r.product = p.product"
        " WHERE SEM_FILTER('{r.review} mentions {p.category}')",
        lambda t: t["reviews"].join(t["products"], "l.product = r.product").sem_filter("{review} mentions {category}"),
    ),
    (
        "SELECT *, SEM_CLASSIFY('Sentiment of {review}', 'positive|negative|neutral') AS sentiment FROM reviews",
        lambda t: t["reviews"].sem_classify("Sentiment of {review}", "positive|negative|neutral", output="sentiment"),
    ),
    (
        "SELECT *, SEM_SCORE('How positive is {review}?', 1, 5) AS stars FROM reviews",
        lambda t: t["reviews"].sem_score("How positive is {review}?", output="stars", lo=1, hi=5),
    ),
    (
        "SELECT id, SEM_EXTRACT('From {body} take the sender and amount', 'sender: text, amount: float') FROM emails",
        lambda t: (
            t["emails"]
            .sem_extract("From {body} take the sender and amount", "sender: text, amount: float")
            .select("id", "sender", "amount")
        ),
    ),
    (
        "SELECT product, SEM_AGG('Summarize {review}') AS summary FROM reviews GROUP BY product",
        lambda t: t["reviews"].sem_agg("Summarize {review}", by="product", output="summary"),
    ),
    (
        "SELECT * FROM reviews JOIN products ON SEM_MATCH('{l.review} is about a {r.category}')",
        lambda t: t["reviews"].sem_join(t["products"], "{l.review} is about a {r.category}"),
    ),
    (
        "SELECT product FROM reviews UNION SELECT product FROM products",
        lambda t: t["reviews"].select("product").union(t["products"].select("product"), distinct=True),
    ),
    (
        "SELECT DISTINCT category FROM products WHERE price > 10 ORDER BY category NULLS FIRST",
        lambda t: t["products"].filter("price > 10").select("category").distinct().sort("category", nulls_first=True),
    ),
]


@pytest.mark.parametrize(("query", "build"), CASES, ids=[query[:50] for query, _ in CASES])
def test_sql_builder_and_json_give_the_same_plan(corpus: dict[str, Node], query: str, build: Builder) -> None:
    from_sql = compile_sql(query, corpus)
    from_builder = build({name: Query(node) for name, node in corpus.items()}).plan
    assert from_sql == from_builder
    assert plan_from_json(plan_to_json(from_sql)) == from_builder


def test_a_hand_written_json_plan_matches_sql(corpus: dict[str, Node]) -> None:
    scan = json.loads(plan_to_json(corpus["reviews"]))["plan"]
    document = {
        "version": 1,
        "plan": {
            "op": "project",
            "exprs": [{"name": "review", "expr": "review"}],
            "input": {"op": "sem_filter", "instruction": "{review} is sarcastic", "input": scan},
        },
    }
    from_json = plan_from_json(json.dumps(document))
    assert from_json == compile_sql("SELECT review FROM reviews WHERE SEM_FILTER('{review} is sarcastic')", corpus)
