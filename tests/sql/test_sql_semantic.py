"""SEM_* functions compile to semantic operators with templates over plan column names."""

from __future__ import annotations

import pytest

from semray.operators import (
    Aggregate,
    ExtractField,
    Filter,
    Join,
    NamedExpr,
    Node,
    Project,
    SemAgg,
    SemClassify,
    SemExtract,
    SemFilter,
    SemJoin,
    SemMap,
    Sort,
    SortKey,
    walk,
)
from semray.sql import compile_sql


def test_where_splits_relational_and_semantic_conjuncts(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT * FROM reviews WHERE SEM_FILTER('{review} complains about delivery') AND rating <= 2", corpus
    )
    assert plan == SemFilter(
        input=Filter(input=corpus["reviews"], predicate="rating <= 2"), instruction="{review} complains about delivery"
    )


def test_qualified_template_references_are_rewritten(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT * FROM reviews AS r WHERE SEM_FILTER('Is {r.review} about {{shipping}}?')", corpus)
    assert isinstance(plan, SemFilter)
    assert plan.instruction == "Is {review} about {{shipping}}?"


def test_sem_map_uses_the_alias_as_output(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT id, SEM_MAP('Summarize {review}') AS summary FROM reviews", corpus)
    assert isinstance(plan, Project)
    assert plan.input == SemMap(input=corpus["reviews"], instruction="Summarize {review}", output="summary")
    assert [item.name for item in plan.exprs] == ["id", "summary"]


def test_select_star_with_semantic_column_needs_no_project(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT *, SEM_MAP('Translate {review} to French', 'text') AS fr FROM reviews", corpus)
    assert plan == SemMap(input=corpus["reviews"], instruction="Translate {review} to French", output="fr")


def test_sem_score_is_a_ranged_sem_map(corpus: dict[str, Node]) -> None:
    ints = compile_sql("SELECT *, SEM_SCORE('How positive is {review}?', 1, 5) AS stars FROM reviews", corpus)
    floats = compile_sql("SELECT *, SEM_SCORE('How positive is {review}?', -1, 1.0) AS s FROM reviews", corpus)
    assert ints == SemMap(
        input=corpus["reviews"], instruction="How positive is {review}?", output="stars", output_type="int", lo=1, hi=5
    )
    assert isinstance(floats, SemMap) and (floats.output_type, floats.lo, floats.hi) == ("float", -1, 1.0)


def test_sem_classify_labels(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT *, SEM_CLASSIFY('Sentiment of {review}', 'positive | negative|neutral') AS s FROM reviews", corpus
    )
    assert plan == SemClassify(
        input=corpus["reviews"],
        instruction="Sentiment of {review}",
        labels=("positive", "negative", "neutral"),
        output="s",
    )


def test_semantic_call_inside_an_expression_gets_a_hidden_column(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT id, upper(SEM_MAP('Name the brand in {review}')) AS brand FROM reviews", corpus)
    assert isinstance(plan, Project)
    assert isinstance(plan.input, SemMap) and plan.input.output == "_sem0"
    assert plan.exprs[1].expr == "UPPER(_sem0)"


def test_sem_filter_in_select_is_a_boolean_column(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT id, SEM_FILTER('{review} mentions price') AS pricey FROM reviews", corpus)
    assert isinstance(plan, Project)
    assert isinstance(plan.input, SemMap) and plan.input.output_type == "bool"


def test_identical_semantic_calls_are_computed_once(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT SEM_MAP('tag {review}') AS a, SEM_MAP('tag {review}') || '!' AS b FROM reviews", corpus)
    assert isinstance(plan, Project) and isinstance(plan.input, SemMap)
    assert plan.input.input == corpus["reviews"]


def test_sem_extract_expands_to_its_fields(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT id, SEM_EXTRACT('From {body} extract the sender and amount', 'sender: text, amount: float, paid: bool')"
        " FROM emails",
        corpus,
    )
    assert isinstance(plan, Project)
    assert [item.name for item in plan.exprs] == ["id", "sender", "amount", "paid"]
    assert plan.input == SemExtract(
        input=corpus["emails"],
        instruction="From {body} extract the sender and amount",
        fields=(
            ExtractField(name="sender"),
            ExtractField(name="amount", type="float"),
            ExtractField(name="paid", type="bool"),
        ),
    )
    assert plan.output_schema.type_of("amount") == "DOUBLE"


def test_sem_agg_groups_by_the_group_keys(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT product, SEM_AGG('Summarize the complaints in {review}') AS summary FROM reviews GROUP BY product",
        corpus,
    )
    assert plan == SemAgg(
        input=corpus["reviews"], instruction="Summarize the complaints in {review}", keys=("product",), output="summary"
    )


def test_sem_agg_without_group_by(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT SEM_AGG('What do {review} have in common?') AS answer FROM reviews WHERE rating = 1", corpus
    )
    assert isinstance(plan, SemAgg) and plan.keys == () and isinstance(plan.input, Filter)


def test_sem_match_is_a_semantic_join(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT r.review, p.category FROM reviews r JOIN products p ON SEM_MATCH('{l.review} is about a {r.category}')",
        corpus,
    )
    assert isinstance(plan, Project)
    assert plan.input == SemJoin(
        left=corpus["reviews"], right=corpus["products"], instruction="{l.review} is about a {r.category}"
    )


def test_sem_match_resolves_table_names_and_suffixed_columns(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT * FROM reviews JOIN products ON SEM_MATCH('{reviews.product} and {products.product} are alike')",
        corpus,
    )
    assert isinstance(plan, SemJoin)
    assert plan.instruction == "{l.product} and {r.product} are alike"
    assert "product_right" in plan.output_schema


def test_sem_match_with_an_equality_is_a_join_then_sem_filter(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT * FROM reviews r JOIN products p"
        " ON r.product = p.product AND SEM_MATCH('{l.review} fits {r.category}')",
        corpus,
    )
    assert isinstance(plan, SemFilter)
    assert plan.instruction == "{review} fits {category}"
    assert isinstance(plan.input, Join) and plan.input.on == "l.product = r.product"


def test_semantic_filter_after_join_and_group(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT p.category, count(*) AS n FROM reviews r JOIN products p ON r.product = p.product "
        "WHERE SEM_FILTER('{r.review} mentions {p.category}') GROUP BY p.category HAVING count(*) > 1",
        corpus,
    )
    assert isinstance(plan, Filter)
    semantic = plan.input.input  # type: ignore[attr-defined]
    assert isinstance(semantic, SemFilter) and semantic.instruction == "{review} mentions {category}"


def test_having_with_sem_filter_reads_group_keys(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT category, count(*) AS n FROM products GROUP BY category HAVING SEM_FILTER('{category} is furniture')",
        corpus,
    )
    assert isinstance(plan, SemFilter) and plan.instruction == "{category} is furniture"


def test_semantic_calls_inside_where_expressions_become_hidden_columns(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT * FROM reviews WHERE rating > 1 AND (SEM_FILTER('{review} is rude') OR rating = 5)", corpus
    )
    assert isinstance(plan, Project) and "_sem0" not in plan.output_schema
    rude = plan.input
    assert isinstance(rude, Filter) and rude.predicate == "_sem0 OR rating = 5"
    assert rude.input == SemMap(
        input=Filter(input=corpus["reviews"], predicate="rating > 1"),
        instruction="{review} is rude",
        output="_sem0",
        output_type="bool",
    )


def test_a_score_computed_in_where_is_reused_in_select(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT id, SEM_SCORE('How kind is {review}?', 1, 5) AS kind FROM reviews"
        " WHERE SEM_SCORE('How kind is {review}?', 1, 5) >= 4",
        corpus,
    )
    assert isinstance(plan, Project) and plan.exprs[1].expr == "_sem0"
    scored = plan.input
    assert isinstance(scored, Filter) and scored.predicate == "_sem0 >= 4"
    assert isinstance(scored.input, SemMap) and scored.input.input == corpus["reviews"]


def test_classify_in_where(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT id FROM reviews WHERE SEM_CLASSIFY('Topic of {review}', 'price|quality') = 'price'", corpus
    )
    assert isinstance(plan, Project)
    assert isinstance(plan.input, Filter) and isinstance(plan.input.input, SemClassify)


def test_order_by_a_semantic_score(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT review FROM reviews ORDER BY SEM_SCORE('How angry is {review}?', 1, 10) DESC LIMIT 5", corpus
    )
    assert isinstance(plan, Project) and [item.name for item in plan.exprs] == ["review"]
    limit = plan.input
    sort = limit.input  # type: ignore[attr-defined]
    assert isinstance(sort, Sort) and sort.keys[0].descending
    assert isinstance(sort.input, Project) and isinstance(sort.input.input, SemMap)
    assert (sort.input.input.lo, sort.input.input.hi) == (1, 10)


def test_sem_filter_inside_an_aggregate_is_a_boolean_column_below_it(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT avg(CASE WHEN SEM_FILTER('{review} is positive') THEN 1.0 ELSE 0.0 END) AS share FROM reviews",
        corpus,
    )
    positive = SemMap(input=corpus["reviews"], instruction="{review} is positive", output="_sem0", output_type="bool")
    assert plan == Aggregate(
        input=positive, keys=(), aggs=(NamedExpr(name="share", expr="AVG(CASE WHEN _sem0 THEN 1.0 ELSE 0.0 END)"),)
    )


def test_sem_filter_inside_a_grouped_aggregate(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT product, avg(CASE WHEN SEM_FILTER('{review} is positive') THEN 1.0 ELSE 0.0 END) AS share"
        " FROM reviews GROUP BY product",
        corpus,
    )
    assert isinstance(plan, Aggregate) and plan.keys == ("product",)
    assert plan.input == SemMap(
        input=corpus["reviews"], instruction="{review} is positive", output="_sem0", output_type="bool"
    )


@pytest.mark.parametrize(
    "group_by", ["topic", "1", "SEM_CLASSIFY('Topic of {review}', 'price|quality')", "ALL"], ids=str
)
def test_group_by_a_classification(corpus: dict[str, Node], group_by: str) -> None:
    plan = compile_sql(
        f"SELECT SEM_CLASSIFY('Topic of {{review}}', 'price|quality') AS topic, count(*) AS n FROM reviews"
        f" GROUP BY {group_by}",
        corpus,
    )
    topics = SemClassify(
        input=corpus["reviews"], instruction="Topic of {review}", labels=("price", "quality"), output="topic"
    )
    assert plan == Aggregate(input=topics, keys=("topic",), aggs=(NamedExpr(name="n", expr="COUNT(*)"),))


def test_group_by_an_expression_over_a_classification(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT upper(SEM_CLASSIFY('Topic of {review}', 'price|quality')) AS t, count(*) AS n FROM reviews GROUP BY 1",
        corpus,
    )
    assert isinstance(plan, Aggregate) and plan.keys == ("t",)
    keys = plan.input
    assert isinstance(keys, Project) and keys.exprs[-1] == NamedExpr(name="t", expr="UPPER(_sem0)")
    assert isinstance(keys.input, SemClassify) and keys.input.output == "_sem0"


def test_average_of_a_score_per_group_ordered_by_its_alias(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT product, avg(SEM_SCORE('Stars for {review}', 1, 5)) AS s FROM reviews GROUP BY product ORDER BY s DESC",
        corpus,
    )
    stars = SemMap(
        input=corpus["reviews"], instruction="Stars for {review}", output="_sem0", output_type="int", lo=1, hi=5
    )
    assert plan == Sort(
        input=Aggregate(input=stars, keys=("product",), aggs=(NamedExpr(name="s", expr="AVG(_sem0)"),)),
        keys=(SortKey(column="s", descending=True),),
    )


def test_one_column_per_distinct_call_and_where_columns_are_reused(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT product, avg(SEM_SCORE('Stars for {review}', 1, 5)) AS s, max(SEM_SCORE('Stars for {review}', 1, 5))"
        " AS m FROM reviews WHERE SEM_SCORE('Stars for {review}', 1, 5) > 1 GROUP BY product",
        corpus,
    )
    assert isinstance(plan, Aggregate)
    assert [agg.expr for agg in plan.aggs] == ["AVG(_sem0)", "MAX(_sem0)"]
    assert sum(isinstance(node, SemMap) for node in walk(plan)) == 1


def test_aggregate_of_a_score_in_having_and_order_by(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT product FROM reviews GROUP BY product HAVING avg(SEM_SCORE('Stars for {review}', 1, 5)) >= 3"
        " ORDER BY max(SEM_SCORE('Stars for {review}', 1, 5)) DESC",
        corpus,
    )
    aggregates = [node for node in walk(plan) if isinstance(node, Aggregate)]
    assert len(aggregates) == 1 and [agg.expr for agg in aggregates[0].aggs] == ["AVG(_sem0)", "MAX(_sem0)"]
    assert isinstance(aggregates[0].input, SemMap)


def test_sem_filter_in_where_still_drops_rows_before_grouping(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT product, count(*) AS n FROM reviews WHERE SEM_FILTER('{review} is positive') GROUP BY product", corpus
    )
    assert isinstance(plan, Aggregate) and isinstance(plan.input, SemFilter)


def test_templates_after_group_by_still_see_the_group_keys(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT product, SEM_MAP('Brand of {product}') AS brand, avg(SEM_SCORE('Stars for {review}', 1, 5)) AS s"
        " FROM reviews GROUP BY product",
        corpus,
    )
    assert isinstance(plan, Project)
    brand = plan.input
    assert isinstance(brand, SemMap) and brand.instruction == "Brand of {product}"
    assert isinstance(brand.input, Aggregate) and isinstance(brand.input.input, SemMap)
