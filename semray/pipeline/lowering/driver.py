"""Lowering's driver: a logical plan -> its physical stages.

``lower`` lowers an operator's inputs first (``Lowering.inputs_of``: its children, unless its
entry says otherwise), then calls the one function ``LOWERINGS`` registers for the operator's type
with them; no lowering function lowers anything itself. It then merges chains of per-batch SQL
(``fuse.py``) and tags the stage with the operator's key, so that the rows the stage passes on
count as the operator's (EXPLAIN). An operator with no entry raises ``LoweringError``.

>>> from semray.operators import Filter, Scan, Schema, SourceSpec
>>> scan = Scan(source=SourceSpec(kind="memory", options={"name": "t"}), source_schema=Schema.of(("x", "BIGINT")))
>>> type(lower(Filter(input=scan, predicate="x > 1"), Settings())).__name__
'BatchSqlStage'
"""

from __future__ import annotations

import dataclasses
from typing import Any

from semray.errors import LoweringError
from semray.operators.base import Node
from semray.operators.keys import operator_key
from semray.operators.relational import Limit
from semray.pipeline.lowering.fuse import fuse_batch_sql
from semray.pipeline.lowering.registry import Lowering
from semray.pipeline.lowering.relational import RELATIONAL_LOWERINGS
from semray.pipeline.lowering.semantic import CODE_LOWERING, ROW_SEMANTIC_LOWERINGS
from semray.pipeline.lowering.set_ops import SET_LOWERINGS
from semray.pipeline.stages.base import Stage
from semray.planner.capabilities import keeps_every_row
from semray.settings import Settings


def registered(*lowerings: Lowering[Any]) -> dict[type[Node], Lowering[Any]]:
    """The dispatch table of ``lowerings``: one entry per operator type."""
    table: dict[type[Node], Lowering[Any]] = {}
    for entry in lowerings:
        if entry.operator in table:
            raise LoweringError(f"{entry.operator.__name__} has two lowerings; register one")
        table[entry.operator] = entry
    return table


LOWERINGS = registered(*RELATIONAL_LOWERINGS, *ROW_SEMANTIC_LOWERINGS, CODE_LOWERING, *SET_LOWERINGS)
"""Operator type -> its lowering; every logical operator has one (tests/test_fitness.py)."""


def lower(node: Node, settings: Settings) -> Stage:
    """The physical plan of a logical plan; raises ``LoweringError`` for an operator with no lowering."""
    entry = LOWERINGS.get(type(node))
    if entry is None:
        raise LoweringError(
            f"{type(node).__name__} has no physical implementation yet: no lowering is registered for it "
            "(LOWERINGS in semray/pipeline/lowering/driver.py; docs/extending.md)"
        )
    inputs = tuple(lower(child, child_settings) for child, child_settings in entry.inputs_of(node, settings))
    stage = fuse_batch_sql(entry.build(node, inputs, settings))
    if keeps_every_row(node) or isinstance(node, Limit):
        # EXPLAIN derives their rows from their input's (a step after a limit would let the
        # stream below it run on after the limit is reached).
        return stage
    # Tagged: the pipeline counts the rows this stage passes on as the operator's actual rows.
    return dataclasses.replace(stage, operators=(*stage.operators, operator_key(node)))
