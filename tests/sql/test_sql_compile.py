"""Plan shapes the SQL compiler produces: one test per construct, no execution."""

from __future__ import annotations

from semray.operators import (
    Aggregate,
    Distinct,
    Filter,
    Join,
    Limit,
    NamedExpr,
    Node,
    Project,
    Scan,
    Sort,
    SortKey,
    Union,
)
from semray.sql import compile_sql


def user_names(node: Node) -> tuple[str, ...]:
    return tuple(column.name for column in node.output_schema.user_columns())


def test_select_star_is_the_scan_itself(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT * FROM reviews", corpus)
    assert plan == corpus["reviews"]
    assert plan.output_schema.names[0] == "_rowid"


def test_projection_and_filter(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT review, rating * 2 AS double FROM reviews r WHERE r.rating >= 4", corpus)
    assert plan == Project(
        input=Filter(input=corpus["reviews"], predicate="rating >= 4"),
        exprs=(NamedExpr(name="review", expr="review"), NamedExpr(name="double", expr="rating * 2")),
    )


def test_where_conjuncts_become_one_filter(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT * FROM reviews WHERE rating > 1 AND (review LIKE 'a%' OR id = 3)", corpus)
    assert isinstance(plan, Filter)
    assert plan.predicate == "(rating > 1) AND (review LIKE 'a%' OR id = 3)"


def test_case_insensitive_names_resolve_to_schema_spelling(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT RATING FROM Reviews", corpus)
    assert isinstance(plan, Project)
    assert plan.exprs == (NamedExpr(name="RATING", expr="rating"),)


def test_quoted_and_reserved_names_are_quoted_in_plans() -> None:
    from semray.operators import Schema, SourceSpec

    scan = Scan(
        source=SourceSpec(kind="csv", path="/x.csv"),
        source_schema=Schema.of(("order", "BIGINT"), ("my col", "VARCHAR")),
    )
    plan = compile_sql('SELECT "order" + 1 AS n, "my col" FROM t WHERE "order" > 0', {"t": scan})
    assert isinstance(plan, Project)
    assert plan.exprs == (NamedExpr(name="n", expr='"order" + 1'), NamedExpr(name="my col", expr='"my col"'))


def test_join_resolves_qualified_names_and_suffixes_clashes(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT r.product, p.product, p.price FROM reviews r JOIN products p ON r.product = p.product", corpus
    )
    assert isinstance(plan, Project)
    join = plan.input
    assert join == Join(left=corpus["reviews"], right=corpus["products"], kind="inner", on="l.product = r.product")
    assert [item.expr for item in plan.exprs] == ["product", "product_right", "price"]
    assert user_names(plan) == ("product", "product_right", "price")


def test_select_star_over_join_keeps_join_names(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT * FROM reviews r JOIN products p ON r.product = p.product", corpus)
    assert isinstance(plan, Join)
    assert user_names(plan) == ("id", "product", "rating", "review", "product_right", "category", "price")


def test_left_join_pushes_right_only_conditions_into_the_right_input(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT * FROM reviews r LEFT JOIN products p ON r.product = p.product AND p.price > 10", corpus)
    assert isinstance(plan, Join) and plan.kind == "left"
    assert plan.right == Filter(input=corpus["products"], predicate="(price > 10)")


def test_right_join_is_a_swapped_left_join_with_sql_column_order(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT * FROM reviews r RIGHT JOIN products p ON r.product = p.product", corpus)
    assert isinstance(plan, Project)
    assert isinstance(plan.input, Join) and plan.input.kind == "left"
    assert plan.input.left == corpus["products"]
    assert user_names(plan)[:4] == ("id", "product", "rating", "review")


def test_semi_and_anti_join_keywords(corpus: dict[str, Node]) -> None:
    semi = compile_sql("SELECT * FROM products p SEMI JOIN reviews r ON p.product = r.product", corpus)
    anti = compile_sql("SELECT * FROM products p ANTI JOIN reviews r ON p.product = r.product", corpus)
    assert isinstance(semi, Join) and semi.kind == "semi"
    assert isinstance(anti, Join) and anti.kind == "anti"
    assert user_names(semi) == user_names(corpus["products"])


def test_in_subquery_is_a_semi_join(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT * FROM products WHERE product IN (SELECT product FROM reviews WHERE rating = 5)", corpus)
    assert isinstance(plan, Join) and plan.kind == "semi"
    assert plan.on == "l.product = r.product"


def test_using_shows_the_column_once(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT * FROM reviews JOIN products USING (product)", corpus)
    assert isinstance(plan, Project)
    assert user_names(plan) == ("id", "product", "rating", "review", "category", "price")


def test_group_by_with_aliases_names_aggregate_columns(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT product, count(*) AS n, avg(rating) AS mean FROM reviews GROUP BY product", corpus)
    assert plan == Aggregate(
        input=corpus["reviews"],
        keys=("product",),
        aggs=(NamedExpr(name="n", expr="COUNT(*)"), NamedExpr(name="mean", expr="AVG(rating)")),
    )


def test_group_by_expression_is_pre_projected(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT upper(product) AS p, count(*) AS n FROM reviews GROUP BY upper(product)", corpus)
    assert isinstance(plan, Aggregate) and plan.keys == ("p",)
    assert isinstance(plan.input, Project)
    assert plan.input.exprs[-1] == NamedExpr(name="p", expr="UPPER(product)")


def test_having_and_order_by_aggregate(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT product FROM reviews GROUP BY product HAVING count(*) > 2 ORDER BY max(rating) DESC", corpus
    )
    assert isinstance(plan, Project) and user_names(plan) == ("product",)
    sort = plan.input
    assert isinstance(sort, Sort) and sort.keys == (SortKey(column="_order0", descending=True),)
    assert isinstance(sort.input, Project)
    having = sort.input.input
    assert isinstance(having, Filter) and having.predicate == "_agg0 > 2"
    assert isinstance(having.input, Aggregate)
    assert [item.expr for item in having.input.aggs] == ["COUNT(*)", "MAX(rating)"]


def test_order_by_alias_position_and_nulls(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT id, rating AS r FROM reviews ORDER BY r DESC NULLS FIRST, 1 LIMIT 5 OFFSET 10", corpus)
    assert isinstance(plan, Limit) and (plan.count, plan.offset) == (5, 10)
    assert isinstance(plan.input, Sort)
    assert plan.input.keys == (SortKey(column="r", descending=True, nulls_first=True), SortKey(column="id"))


def test_order_by_unselected_column_is_hidden_then_dropped(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT id FROM reviews ORDER BY rating LIMIT 3", corpus)
    assert isinstance(plan, Project) and user_names(plan) == ("id",)
    assert isinstance(plan.input, Limit) and isinstance(plan.input.input, Sort)
    assert user_names(plan.input.input) == ("id", "_order0")


def test_distinct(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT DISTINCT product FROM reviews", corpus)
    assert isinstance(plan, Distinct) and user_names(plan) == ("product",)


def test_union_all_flattens_and_union_adds_distinct(corpus: dict[str, Node]) -> None:
    three = compile_sql(
        "SELECT product FROM reviews UNION ALL SELECT product FROM products UNION ALL SELECT category FROM products",
        corpus,
    )
    assert isinstance(three, Union) and len(three.inputs) == 3
    assert user_names(three) == ("product",)
    distinct = compile_sql("SELECT product FROM reviews UNION SELECT product FROM products", corpus)
    assert isinstance(distinct, Distinct) and isinstance(distinct.input, Union)


def test_union_casts_to_the_common_type(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT rating FROM reviews UNION ALL SELECT price FROM products", corpus)
    assert isinstance(plan, Union)
    assert plan.output_schema.type_of("rating") == "DOUBLE"


def test_cte_and_subquery_in_from(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "WITH good AS (SELECT * FROM reviews WHERE rating >= 4) SELECT s.n FROM (SELECT count(*) AS n FROM good) s",
        corpus,
    )
    assert isinstance(plan, Aggregate)
    assert plan.input == Filter(input=corpus["reviews"], predicate="rating >= 4")


def test_cte_shadows_a_table(corpus: dict[str, Node]) -> None:
    plan = compile_sql("WITH reviews AS (SELECT id FROM reviews) SELECT * FROM reviews", corpus)
    assert user_names(plan) == ("id",)


def test_duplicate_output_names_get_suffixes(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT id, id, rating AS id FROM reviews", corpus)
    assert user_names(plan) == ("id", "id_1", "id_2")


def test_every_plan_round_trips_through_json(corpus: dict[str, Node]) -> None:
    from semray.operators import plan_from_json, plan_to_json

    plan = compile_sql(
        "SELECT p.category, count(*) AS n FROM reviews r JOIN products p ON r.product = p.product "
        "WHERE r.rating > 2 GROUP BY p.category ORDER BY n DESC LIMIT 3",
        corpus,
    )
    assert plan_from_json(plan_to_json(plan)) == plan


def test_the_sql_package_does_not_import_ray() -> None:
    import subprocess
    import sys

    probe = "import sys, semray.sql; print(any(m == 'ray' or m.startswith('ray.') for m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "False"
