"""The plan IR: construction invariants, derived schemas, structural equality, transform."""

from __future__ import annotations

import pytest

from semray.errors import ColumnNotFoundError, ExpressionError, PlanError
from semray.operators import (
    Aggregate,
    Distinct,
    ExtractField,
    Filter,
    Join,
    Limit,
    NamedExpr,
    Project,
    Scan,
    SemAgg,
    SemClassify,
    SemExtract,
    SemFilter,
    SemJoin,
    SemMap,
    SemSearch,
    SemTopK,
    Sort,
    SortKey,
    Union,
    render_tree,
    transform,
    walk,
)


def test_scan_schema_has_row_id_first(reviews: Scan) -> None:
    assert reviews.output_schema.names == ("_rowid", "review_id", "product", "rating", "review")


def test_scan_column_subset(reviews: Scan) -> None:
    narrowed = reviews.model_copy(update={"columns": ("rating",)})
    assert Scan.model_validate(narrowed.model_dump()).output_schema.names == ("_rowid", "rating")


def test_unknown_column_suggests_closest(reviews: Scan) -> None:
    with pytest.raises(ColumnNotFoundError, match="did you mean 'review'"):
        Filter(input=reviews, predicate="revew = 'x'")


def test_type_mismatch_is_rejected_at_construction(reviews: Scan) -> None:
    with pytest.raises(ExpressionError, match="does not type-check"):
        Filter(input=reviews, predicate="rating > 'abc'")


def test_predicate_must_be_boolean(reviews: Scan) -> None:
    with pytest.raises(PlanError, match="not BOOLEAN"):
        Filter(input=reviews, predicate="rating + 1")


def test_parse_error_names_position(reviews: Scan) -> None:
    with pytest.raises(ExpressionError, match="cannot parse"):
        Filter(input=reviews, predicate="rating >")


def test_project_types_are_derived(reviews: Scan) -> None:
    node = Project(
        input=reviews, exprs=(NamedExpr(name="double", expr="rating * 2.5"), NamedExpr(name="p", expr="upper(product)"))
    )
    assert [(c.name, c.type) for c in node.output_schema] == [
        ("_rowid", "VARCHAR"),
        ("double", "DECIMAL(21,1)"),
        ("p", "VARCHAR"),
    ]


def test_join_suffixes_clashing_right_columns(reviews: Scan, products: Scan) -> None:
    node = Join(left=reviews, right=products, on="l.product = r.product")
    assert node.output_schema.names[-3:] == ("product_right", "category", "list_price")
    assert node.keys == ((("product", "product"),), None)


def test_join_needs_an_equality(reviews: Scan, products: Scan) -> None:
    with pytest.raises(PlanError, match="no equality"):
        Join(left=reviews, right=products, on="l.rating > r.list_price")


def test_left_join_rejects_residual(reviews: Scan, products: Scan) -> None:
    with pytest.raises(PlanError, match="pure equality"):
        Join(left=reviews, right=products, kind="left", on="l.product = r.product AND l.rating > 3")


def test_semi_join_keeps_left_columns(reviews: Scan, products: Scan) -> None:
    node = Join(left=reviews, right=products, kind="semi", on="l.product = r.product")
    assert node.output_schema == reviews.output_schema


def test_aggregate_schema_and_validation(reviews: Scan) -> None:
    node = Aggregate(
        input=reviews,
        keys=("product",),
        aggs=(NamedExpr(name="n", expr="count(*)"), NamedExpr(name="avg", expr="avg(rating)")),
    )
    assert [(c.name, c.type) for c in node.output_schema][1:] == [
        ("product", "VARCHAR"),
        ("n", "BIGINT"),
        ("avg", "DOUBLE"),
    ]
    with pytest.raises(ExpressionError, match="not an aggregate"):
        Aggregate(input=reviews, keys=("product",), aggs=(NamedExpr(name="r", expr="rating"),))


def test_union_requires_matching_schemas(reviews: Scan, products: Scan) -> None:
    assert Union(inputs=(reviews, reviews)).output_schema == reviews.output_schema
    with pytest.raises(PlanError, match="same names and types"):
        Union(inputs=(reviews, products))


def test_limit_and_sort_validation(reviews: Scan) -> None:
    with pytest.raises(PlanError):
        Limit(input=reviews, count=-1)
    with pytest.raises(ColumnNotFoundError):
        Sort(input=reviews, keys=(SortKey(column="ratin"),))


def test_semantic_templates_are_checked(reviews: Scan, products: Scan) -> None:
    SemFilter(input=reviews, instruction="{review} mentions delivery")
    with pytest.raises(ColumnNotFoundError, match="did you mean 'review'"):
        SemFilter(input=reviews, instruction="{reviw} mentions delivery")
    with pytest.raises(PlanError, match="references no column"):
        SemFilter(input=reviews, instruction="is it good?")
    with pytest.raises(PlanError, match="both sides"):
        SemJoin(left=reviews, right=products, instruction="{l.review} is good")


def test_semantic_output_schemas(reviews: Scan, products: Scan) -> None:
    assert (
        SemMap(
            input=reviews, instruction="{review}", output="score", output_type="int", lo=1, hi=5
        ).output_schema.names[-1]
        == "score"
    )
    extract = SemExtract(
        input=reviews,
        instruction="{review}",
        fields=(ExtractField(name="issue"), ExtractField(name="cost", type="float")),
    )
    assert [c.type for c in extract.output_schema][-2:] == ["VARCHAR", "DOUBLE"]
    assert SemClassify(input=reviews, instruction="{review}", labels=("pos", "neg")).output_schema.names[-1] == "label"
    assert SemTopK(input=reviews, instruction="most useful {review}", k=3).output_schema.names[-1] == "rank"
    assert SemAgg(input=reviews, instruction="summarise {review}", keys=("product",)).output_schema.names == (
        "_rowid",
        "product",
        "answer",
    )
    assert SemSearch(input=reviews, column="review", query="late delivery", k=5).output_schema.names[-1] == "score"
    joined = SemJoin(left=reviews, right=products, instruction="{l.review} is about {r.product}")
    assert "product_right" in joined.output_schema.names
    with pytest.raises(PlanError, match="already exists"):
        SemMap(input=reviews, instruction="{review}", output="rating")
    with pytest.raises(PlanError, match="unique"):
        SemClassify(input=reviews, instruction="{review}", labels=("a", "a"))


def test_capabilities_are_declared(reviews: Scan) -> None:
    assert SemFilter(input=reviews, instruction="{review} ok").calls_llm
    assert not Filter(input=reviews, predicate="rating > 1").calls_llm
    assert SemMap(input=reviews, instruction="{review}", output="x").row_preserving
    assert SemFilter(input=reviews, instruction="{review} ok").columns_read() == {"review"}
    assert Filter(input=reviews, predicate="rating > 1 AND product = 'x'").columns_read() == {"rating", "product"}


def test_structural_equality_and_hash(reviews: Scan) -> None:
    a = Filter(input=reviews, predicate="rating >= 4")
    b = Filter(input=reviews, predicate="rating >= 4")
    assert a == b and hash(a) == hash(b) and a is not b
    assert len({a, b}) == 1


def test_nodes_are_frozen(reviews: Scan) -> None:
    node = Filter(input=reviews, predicate="rating >= 4")
    with pytest.raises(Exception, match="frozen"):
        node.predicate = "rating > 1"  # type: ignore[misc]


def test_transform_rewrites_bottom_up_and_reaches_fixpoint(reviews: Scan) -> None:
    plan = Limit(input=Filter(input=Filter(input=reviews, predicate="rating >= 4"), predicate="rating <= 5"), count=3)

    def merge_filters(node):  # type: ignore[no-untyped-def]
        if isinstance(node, Filter) and isinstance(node.input, Filter):
            return Filter(input=node.input.input, predicate=f"({node.input.predicate}) AND ({node.predicate})")
        return node

    merged = transform(plan, merge_filters)
    assert [type(n).__name__ for n in walk(merged)] == ["Limit", "Filter", "Scan"]
    assert transform(merged, merge_filters) == merged
    assert transform(plan, lambda n: n) == plan


def test_with_children_replaces_in_order(reviews: Scan, products: Scan) -> None:
    join = Join(left=reviews, right=products, on="l.product = r.product")
    swapped_left = join.with_children((Distinct(input=reviews), products))
    assert isinstance(swapped_left.left, Distinct)


def test_explain_tree(reviews: Scan, products: Scan) -> None:
    plan = Limit(
        input=Join(left=Filter(input=reviews, predicate="rating >= 4"), right=products, on="l.product = r.product"),
        count=3,
    )
    assert render_tree(plan).splitlines() == [
        "Limit 3",
        "└─ Join inner on l.product = r.product",
        "   ├─ Filter rating >= 4",
        "   │  └─ Scan csv:/data/reviews.csv",
        "   └─ Scan csv:/data/products.csv",
    ]
