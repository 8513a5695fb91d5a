"""Join ordering: the DP finds a cheaper order than the written one, keeps rows and columns,
and leaves regions it cannot re-qualify alone."""

from __future__ import annotations

import pyarrow as pa
from planner_reference import as_multiset, evaluate, memory_scan, model_calls

from semray.cost_model.cardinality import default_rows
from semray.operators import ROW_ID, Join, Node, Scan, SemJoin, render_tree, walk
from semray.planner.join_order import order_joins

TABLES = {
    "a": pa.table({"a_id": list(range(12)), "a_text": [f"alpha {i % 4}" for i in range(12)]}),
    "b": pa.table(
        {"b_id": list(range(12)), "b_text": [f"beta {i % 3}" for i in range(12)], "b_key": [i % 6 for i in range(12)]}
    ),
    "c": pa.table({"c_key": [0, 1], "c_name": ["zero", "one"]}),
}
ROWS = {"a": 12.0, "b": 12.0, "c": 2.0}
SELECTIVITY = {"l.b_key = r.c_key": 1 / 6}


def scan(name: str) -> Scan:
    return memory_scan(name, TABLES[name])


def cardinality(node: Node) -> float:
    if isinstance(node, Scan):
        return ROWS[str(node.source.options["name"])]
    if isinstance(node, Join):
        return cardinality(node.left) * cardinality(node.right) * SELECTIVITY.get(node.on, 0.1)
    if isinstance(node, SemJoin):
        return cardinality(node.left) * cardinality(node.right) * 0.3
    return default_rows(node)


def written() -> Node:
    matched = SemJoin(left=scan("a"), right=scan("b"), instruction="{l.a_text} matches {r.b_text}")
    return Join(left=matched, right=scan("c"), on="l.b_key = r.c_key")


def without_row_ids(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{key: value for key, value in row.items() if key != ROW_ID} for row in rows]


def test_selective_relational_join_runs_before_the_semantic_join() -> None:
    plan = written()
    ordered = order_joins(plan, cardinality)
    assert ordered != plan, render_tree(ordered)
    semantic = next(node for node in walk(ordered) if isinstance(node, SemJoin))
    assert any(isinstance(node, Join) for node in walk(semantic)), render_tree(ordered)
    assert ordered.output_schema.names == plan.output_schema.names
    before, after = evaluate(plan, TABLES), evaluate(ordered, TABLES)
    assert as_multiset(without_row_ids(after)) == as_multiset(without_row_ids(before))
    assert model_calls(ordered, TABLES)["sem_join"] < model_calls(plan, TABLES)["sem_join"]


def test_semantic_template_is_requalified_when_sides_swap() -> None:
    ordered = order_joins(written(), cardinality)
    semantic = next(node for node in walk(ordered) if isinstance(node, SemJoin))
    assert semantic.instruction in ("{l.a_text} matches {r.b_text}", "{r.a_text} matches {l.b_text}")


def test_two_relations_are_left_as_written() -> None:
    plan = SemJoin(left=scan("a"), right=scan("b"), instruction="{l.a_text} matches {r.b_text}")
    assert order_joins(plan, cardinality) == plan


def test_clashing_column_names_leave_the_region_alone() -> None:
    b_again = memory_scan("a", TABLES["a"])
    matched = SemJoin(left=scan("a"), right=b_again, instruction="{l.a_text} matches {r.a_text}")
    plan = Join(left=matched, right=scan("c"), on="l.a_id = r.c_key")
    assert order_joins(plan, cardinality) == plan


def test_cheaper_written_order_is_kept() -> None:
    plan = SemJoin(
        left=Join(left=scan("b"), right=scan("c"), on="l.b_key = r.c_key"),
        right=scan("a"),
        instruction="{r.a_text} matches {l.b_text}",
    )
    assert order_joins(plan, cardinality) == plan


def factorized_over_b_and_a(**fields: object) -> Node:
    """A factorized join written with ``b`` on the left: the DP would rather put ``b`` (joined to ``c``) right."""
    matched = SemJoin.model_validate({"left": scan("b"), "right": scan("a"), "implementation": "factorized", **fields})
    return Join(left=matched, right=scan("c"), on="l.b_key = r.c_key")


def test_swapping_the_sides_of_an_ordered_factorized_join_flips_its_relation() -> None:
    plan = factorized_over_b_and_a(
        instruction="{l.b_text} is more urgent than {r.a_text}", factor="urgent", relation=">"
    )
    ordered = order_joins(plan, cardinality)
    semantic = next(node for node in walk(ordered) if isinstance(node, SemJoin))
    assert semantic.instruction == "{r.b_text} is more urgent than {l.a_text}", render_tree(ordered)
    assert semantic.relation == "<"  # a's score below b's: still "b is more urgent than a"
    assert ordered.output_schema.names == plan.output_schema.names


def test_a_symmetric_factorized_join_keeps_its_relation_when_sides_swap() -> None:
    plan = factorized_over_b_and_a(instruction="{l.b_text} and {r.a_text} differ in tone", factor="tone", relation="<>")
    semantic = next(node for node in walk(order_joins(plan, cardinality)) if isinstance(node, SemJoin))
    assert semantic.instruction == "{r.b_text} and {l.a_text} differ in tone" and semantic.relation == "<>"


def test_a_join_whose_right_side_is_its_label_set_keeps_its_sides() -> None:
    plan = factorized_over_b_and_a(
        instruction="{l.b_text} is about {r.a_text}", labels=("alpha 0", "alpha 1"), right_labels=True
    )
    ordered = order_joins(plan, cardinality)
    semantic = next(node for node in walk(ordered) if isinstance(node, SemJoin))
    assert semantic.instruction == "{l.b_text} is about {r.a_text}" and semantic.right == scan("a")
