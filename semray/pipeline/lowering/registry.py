"""One entry of lowering's dispatch table: how one operator type lowers, typed for that type.

A lowering function takes the operator, its inputs already lowered and the settings, and returns
its stage; it never lowers anything itself (``driver.lower`` does, children first). Where an
operator's inputs are not simply its children under the same settings, its entry says what they
are (``inputs``): a LIMIT lowers its input with small model batches, and perhaps a rewritten
input (``cost_model/limit_chain.limit_input``).

>>> from semray.operators import Filter
>>> from semray.pipeline.stages.relational import BatchSqlStage
>>> def lower_filter(node: Filter, inputs: Inputs, settings: Settings) -> Stage:
...     return BatchSqlStage(sql=f"SELECT * FROM batch WHERE ({node.predicate})", inputs=inputs)
>>> Lowering(Filter, lower_filter).operator.__name__
'Filter'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from semray.operators.base import Node
from semray.pipeline.stages.base import Stage
from semray.settings import Settings

N = TypeVar("N", bound=Node)

Inputs = tuple[Stage, ...]
"""An operator's inputs, lowered: one stage per entry of its ``Lowering.inputs_of``, in order."""
InputPlan = tuple[tuple[Node, Settings], ...]
"""What lowering lowers as an operator's inputs, each node with the settings to lower it with."""


@dataclass(frozen=True, slots=True)
class Lowering(Generic[N]):
    """How operators of type ``operator`` lower: ``build`` makes the stage from the inputs that
    ``inputs`` names (by default the operator's children, lowered with the same settings)."""

    operator: type[N]
    build: Callable[[N, Inputs, Settings], Stage]
    inputs: Callable[[N, Settings], InputPlan] | None = None

    def inputs_of(self, node: N, settings: Settings) -> InputPlan:
        """The nodes to lower as ``node``'s inputs, each with the settings to lower it with."""
        if self.inputs is None:
            return tuple((child, settings) for child in node.children)
        return self.inputs(node, settings)
