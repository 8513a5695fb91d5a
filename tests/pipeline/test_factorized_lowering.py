"""How a factorized SemJoin lowers: the side question by relation and labels, the relational
condition, the right side left unasked when it holds the labels; and the node's invariants."""

from __future__ import annotations

from collections import Counter

import duckdb
import pyarrow as pa
import pytest

from semray import from_arrow
from semray.errors import SemrayError
from semray.operators.relational import Limit
from semray.operators.semantic import SemJoin
from semray.pipeline.lowering.driver import lower
from semray.pipeline.lowering.set_ops import FACTOR_KEY, factor_condition, factor_task
from semray.pipeline.stages.relational import BroadcastJoinStage, GrowingLimitStage, SelfJoinStage
from semray.pipeline.stages.semantic import SemanticStage
from semray.settings import Settings
from semray.tasks import TaskKind

LEFT = from_arrow(pa.table({"a": ["x", "y"]}), "left").plan
RIGHT = from_arrow(pa.table({"b": ["u", "v"]}), "right").plan


def join(**fields: object) -> SemJoin:
    return SemJoin(
        left=LEFT, right=RIGHT, instruction="{l.a} and {r.b} differ in tone", implementation="factorized", **fields
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "kind", "key_type"),
    [
        ({}, TaskKind.MAP, "VARCHAR"),
        ({"factor": "tone", "relation": "<>"}, TaskKind.MAP, "VARCHAR"),
        ({"factor": "tone", "relation": "=", "labels": ("calm", "angry")}, TaskKind.CLASSIFY, "VARCHAR"),
        ({"factor": "urgency", "relation": ">"}, TaskKind.SCORE, "DOUBLE"),
    ],
)
def test_each_side_is_asked_by_the_relation_and_labels(
    fields: dict[str, object], kind: TaskKind, key_type: str
) -> None:
    node = join(**fields)
    stage = lower(node, Settings())
    assert isinstance(stage, BroadcastJoinStage)
    assert [s.task.kind for s in stage.inputs if isinstance(s, SemanticStage)] == [kind, kind]
    assert (FACTOR_KEY, key_type) in stage.right_columns
    assert factor_condition(node.relation) in stage.sql
    if "factor" in fields:
        assert f"the {fields['factor']} of this text" in factor_task(node, "l").instruction or kind == TaskKind.SCORE


def test_the_right_values_as_labels_ask_only_the_left_side() -> None:
    node = join(right_labels=True, labels=("u", "v"))
    stage = lower(node, Settings())
    assert isinstance(stage, BroadcastJoinStage) and isinstance(stage.inputs[0], SemanticStage)
    assert not isinstance(stage.inputs[1], SemanticStage)
    assert stage.inputs[0].task.choices == ("u", "v") and 'r."b"' in stage.sql


@pytest.mark.parametrize(
    ("relation", "pairs"),
    [
        ("=", {("calm", "calm"): 4, ("angry", "angry"): 1}),  # " Calm" is "calm"
        ("<>", {("calm", "angry"): 2, ("angry", "calm"): 2}),
        (">", {(2.0, 1.0): 1}),
        ("<", {(1.0, 2.0): 1}),
    ],
)
def test_the_condition_joins_the_answers_by_the_relation(
    relation: str, pairs: dict[tuple[object, object], int]
) -> None:
    values: list[object] = [1.0, 2.0] if relation in ("<", ">") else ["calm", " Calm", "angry"]
    l = pa.table({FACTOR_KEY: values})  # noqa: E741, F841 (read by DuckDB)
    r = pa.table({FACTOR_KEY: values})  # noqa: F841
    found = duckdb.sql(
        f"SELECT l.{FACTOR_KEY}, r.{FACTOR_KEY} FROM l JOIN r ON ({factor_condition(relation)})"
    ).fetchall()
    normal = Counter(tuple(str(v).strip().lower() if isinstance(v, str) else v for v in row) for row in found)
    assert normal == Counter(pairs)


@pytest.mark.parametrize(
    "fields",
    [
        {"implementation": "auto", "factor": "tone"},
        {"relation": ">"},  # an ordered relation needs a named factor
        {"factor": "tone", "relation": ">", "labels": ("a", "b")},
        {"right_labels": True},  # without labels
        {"right_labels": True, "labels": ("u",), "relation": "<>"},
    ],
)
def test_inconsistent_factorizations_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(SemrayError):
        SemJoin(
            left=LEFT,
            right=RIGHT,
            instruction="{l.a} and {r.b} differ in tone",
            **{"implementation": "factorized", **fields},
        )  # type: ignore[arg-type]


def test_explain_names_the_factorization_and_its_agreement() -> None:
    assert join().label() == "SemJoin[factorized] '{l.a} and {r.b} differ in tone'"
    verified = join(factor="tone", relation="<>", agreement=0.97).label()
    assert verified.startswith("SemJoin[factorized: tone <>, verified: agreement 0.970]")


def test_a_self_join_asks_its_one_relation_once() -> None:
    """One input plan read through the same cells on both sides: one side question (n calls), the
    answers joined with themselves; another relation or other cells keep both sides' questions."""
    same = SemJoin(left=LEFT, right=LEFT, instruction="{l.a} and {r.a} differ in tone", implementation="factorized")
    stage = lower(same, Settings())
    assert isinstance(stage, SelfJoinStage) and len(stage.inputs) == 1
    assert isinstance(stage.inputs[0], SemanticStage) and stage.inputs[0].task == factor_task(same, "r")
    limited = lower(Limit(input=same, count=5), Settings())
    assert isinstance(limited, GrowingLimitStage) and limited.first_rows == 8  # sqrt(5 / 0.1) rows
    other_cells = from_arrow(pa.table({"a": ["x"], "c": ["z"]}), "left").plan
    for node in (
        join(),
        SemJoin(left=other_cells, right=other_cells, instruction="{l.a} and {r.c} differ", implementation="factorized"),
    ):
        assert isinstance(lower(node, Settings()), BroadcastJoinStage)


def test_two_reads_of_one_table_are_one_relation_two_tables_are_not() -> None:
    """Structurally equal sides are one relation whoever built them: two reads of one table (under
    two names too: the content digest names it), two reads of one file; tables of other content,
    or the same table under different operators, keep both sides' questions."""
    table = pa.table({"a": ["x", "y"]})
    instruction = "{l.a} and {r.a} differ in tone"

    def lowered(left: object, right: object) -> object:
        return lower(SemJoin(left=left, right=right, instruction=instruction, implementation="factorized"), Settings())  # type: ignore[arg-type]

    assert isinstance(lowered(from_arrow(table, "a").plan, from_arrow(table, "b").plan), SelfJoinStage)
    assert isinstance(lowered(from_arrow(table).plan, from_arrow(table).plan), SelfJoinStage)
    other = from_arrow(pa.table({"a": ["x", "z"]}), "a").plan
    assert isinstance(lowered(from_arrow(table, "a").plan, other), BroadcastJoinStage)
    filtered = from_arrow(table, "a").filter("a = 'x'").plan
    assert isinstance(lowered(from_arrow(table, "a").plan, filtered), BroadcastJoinStage)
    assert isinstance(lowered(filtered, from_arrow(table, "b").filter("a = 'x'").plan), SelfJoinStage)
