"""Rule 4: push LIMIT below operators that keep every row, so upstream work stops early.

Precondition and rewrites:

* ``Limit`` over an operator that yields exactly one output row per input row, in order
  (``Project``; map, extract, classify with ``on_error`` not ``skip``): the limit moves below
  it, so the operator runs on ``count + offset`` rows only.
* ``Limit`` over ``Limit``: one limit with the combined window.
* ``Limit`` over ``Union``: each input gets ``Limit(count + offset)`` too (the outer one stays).

A limit never crosses a filter (relational or semantic), a join, an aggregate, a sort or a
top-k: which rows survive those depends on rows the limit would have cut. What makes
``SemFilter ... LIMIT k`` stop early is this rule clearing the way (the limit ends up
directly above the filter) and the streaming pipeline, which stops pulling batches through
the filter once ``k`` rows have passed.

Why results are preserved: an operator that maps each row to one row in order commutes with
taking the first ``n`` rows; the first ``n`` rows of a concatenation come from the first ``n``
rows of each part.

Before::

    Limit 10
    └─ SemMap '{review} summary' -> summary
       └─ SemFilter '{review} mentions delivery'

After::

    SemMap '{review} summary' -> summary
    └─ Limit 10
       └─ SemFilter '{review} mentions delivery'
"""

from __future__ import annotations

from semray.operators.base import Node, transform
from semray.operators.relational import Limit, Unary, Union
from semray.planner.capabilities import keeps_every_row
from semray.planner.rules.context import EMPTY_CONTEXT, RuleContext


def push_limit_down(plan: Node, context: RuleContext = EMPTY_CONTEXT) -> Node:
    """Move limits below row-preserving operators, merge stacked limits, bound union inputs."""
    return transform(plan, _push)


def _push(node: Node) -> Node:
    if not isinstance(node, Limit):
        return node
    child = node.input
    if isinstance(child, Limit):
        skipped = node.offset + child.offset
        count = max(0, min(node.count, child.count - node.offset))
        return _push(Limit(input=child.input, count=count, offset=skipped))
    if isinstance(child, Unary) and keeps_every_row(child):
        return child.with_children((_push(node.with_children((child.input,))),))
    if isinstance(child, Union):
        window = node.count + node.offset
        inputs = tuple(_bounded(part, window) for part in child.inputs)
        return node.with_children((child.with_children(inputs),))
    return node


def _bounded(node: Node, window: int) -> Node:
    if isinstance(node, Limit) and node.offset == 0 and node.count <= window:
        return node
    return _push(Limit(input=node, count=window))
