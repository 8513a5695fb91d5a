"""What rules may know beyond the plan: measured selectivities and per-row costs.

Rules stay pure functions of (plan, context); without statistics the context knows
nothing and the rules that need it return their input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from semray.operators.base import Node


def _unknown(node: Node) -> float | None:
    return None


@dataclass(frozen=True, slots=True)
class RuleContext:
    """``selectivity(node)``: fraction of rows a filter keeps; ``row_cost(node)``: cost per input
    row (dollars, or any unit shared by all operators). Either answers None when unknown.

    >>> RuleContext().selectivity is _unknown
    True
    """

    selectivity: Callable[[Node], float | None] = field(default=_unknown)
    row_cost: Callable[[Node], float | None] = field(default=_unknown)


EMPTY_CONTEXT = RuleContext()
