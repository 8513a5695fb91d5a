"""Lowering's driver (no Ray): inputs first, then one function per operator type; an operator with
no lowering is named in the error; an entry's ``inputs`` decides how its inputs are lowered."""

from __future__ import annotations

import pyarrow as pa
import pytest

from semray.errors import LoweringError
from semray.operators import Filter, Limit, NamedExpr, Project
from semray.operators.keys import operator_key
from semray.operators.semantic import SemFilter
from semray.pipeline.lowering.driver import LOWERINGS, lower, registered
from semray.pipeline.lowering.registry import Inputs, Lowering
from semray.pipeline.lowering.relational import lower_filter
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.relational import BatchSqlStage, ReadStage
from semray.pipeline.stages.semantic import SemanticStage
from semray.readers import from_arrow
from semray.settings import Settings

SCAN = from_arrow(pa.table({"x": [1, 2, 3], "review": ["a", "b", "c"]}), "t").plan


def test_an_operator_with_no_lowering_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(LOWERINGS, Project)
    plan = Filter(input=Project(input=SCAN, exprs=(NamedExpr(name="y", expr="x + 1"),)), predicate="y > 1")
    with pytest.raises(LoweringError, match=r"^Project has no physical implementation yet"):
        lower(plan, Settings())


def test_a_type_has_one_lowering() -> None:
    with pytest.raises(LoweringError, match="Filter has two lowerings"):
        registered(Lowering(Filter, lower_filter), Lowering(Filter, lower_filter))


def test_inputs_are_lowered_first_and_handed_to_the_operators_function(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[Filter, Inputs]] = []

    def recording(node: Filter, inputs: Inputs, settings: Settings) -> Stage:
        seen.append((node, inputs))
        return lower_filter(node, inputs, settings)

    monkeypatch.setitem(LOWERINGS, Filter, Lowering(Filter, recording))
    inner = Filter(input=SCAN, predicate="x > 1")
    outer = Filter(input=inner, predicate="x < 3")
    stage = lower(outer, Settings())
    # Children first: the inner filter's function ran before the outer one's, each given its input's stage.
    assert [node for node, _ in seen] == [inner, outer]
    assert isinstance(seen[0][1][0], ReadStage)
    assert isinstance(seen[1][1][0], BatchSqlStage) and seen[1][1][0].sql.endswith("WHERE (x > 1)")
    # Each stage tagged with its operator's key (a filter's rows are counted, so the two do not fuse).
    assert isinstance(stage, BatchSqlStage) and stage.operators == (operator_key(outer),)
    assert stage.inputs[0].operators == (operator_key(inner),)


def test_an_entrys_inputs_decide_how_its_inputs_lower() -> None:
    """A LIMIT lowers its input with small model batches (``relational.limit_inputs``)."""
    settings = Settings(semantic_batch_size=4, semantic_batch_max=64)
    big = from_arrow(pa.table({"review": [f"r{i}" for i in range(100_000)]}), "big").plan
    semantic = SemFilter(input=big, instruction="{review} is kind", tier="small")
    alone = lower(semantic, settings)
    limited = lower(Limit(input=semantic, count=500), settings)
    assert isinstance(alone, SemanticStage) and alone.batch_rows == 64
    below = limited.inputs[0]
    assert isinstance(below, SemanticStage) and below.batch_rows == 4
    assert LOWERINGS[Limit].inputs is not None and LOWERINGS[Filter].inputs is None
