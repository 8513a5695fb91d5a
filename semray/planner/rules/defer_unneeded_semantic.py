"""Rule 2: move a semantic operator above filters that do not need its outputs.

Precondition: a row-wise semantic operator that adds columns (map, extract, classify)
directly below a parent that only drops rows and adds no columns (``Filter``,
``SemFilter`` without diagnostics, or a semi/anti ``Join`` with it on the left), and the
parent reads none of the operator's outputs. The operator then runs after the parent,
on the rows the parent keeps only: fewer model calls, never more.

Why results are preserved: both operators decide or compute per row, independently of
other rows; the parent's decision reads only columns the operator passes through unchanged,
and the operator's answer for a row does not depend on which other rows survive. Column
order is unchanged because the parent adds no columns. (Relational ``Filter`` parents reach
the same shape through rule 1; ``Limit`` parents through rule 4.)

Before::

    SemFilter '{review} mentions delivery'
    └─ SemMap '{review} summary' -> summary
       └─ Scan reviews

After::

    SemMap '{review} summary' -> summary
    └─ SemFilter '{review} mentions delivery'
       └─ Scan reviews
"""

from __future__ import annotations

from semray.operators.base import Node, transform
from semray.planner.capabilities import added_columns, drops_rows_only, is_row_wise_semantic
from semray.planner.rules.context import EMPTY_CONTEXT, RuleContext


def defer_unneeded_semantic(plan: Node, context: RuleContext = EMPTY_CONTEXT) -> Node:
    """Move row-wise semantic operators above row-dropping parents that do not read their outputs."""
    return transform(plan, _defer)


def _defer(node: Node) -> Node:
    if not drops_rows_only(node) or not node.children:
        return node
    child = node.children[0]
    produced = added_columns(child)
    if not (is_row_wise_semantic(child) and produced) or node.columns_read() & produced:
        return node
    (grandchild,) = child.children
    lowered = node.with_children((grandchild, *node.children[1:]))
    return child.with_children((_defer(lowered),))
