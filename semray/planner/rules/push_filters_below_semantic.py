"""Rule 1: run relational filters before semantic operators; they cost nothing per row.

Precondition: a ``Filter`` directly above a row-wise semantic operator (filter, map,
extract, classify) or above a ``SemJoin``. Each conjunct of the predicate that reads none of
the columns the semantic operator adds moves below it; for a ``SemJoin``, a conjunct moves
into the one side whose columns it reads (not ``_rowid``, not a renamed right column).

Why results are preserved: a row-wise operator answers each row on its own, so whether a
row is dropped before or after it does not change any other row's answer, and the moved
conjunct reads only values the operator passes through unchanged. A conjunct over one side
of a join holds for a pair exactly when it holds for that side's row.

Before::

    Filter rating >= 4 AND sentiment = 'positive'
    └─ SemClassify '{review}' -> sentiment
       └─ Scan reviews

After::

    Filter sentiment = 'positive'
    └─ SemClassify '{review}' -> sentiment
       └─ Filter rating >= 4
          └─ Scan reviews
"""

from __future__ import annotations

from collections.abc import Callable

from semray.operators.base import Node, transform
from semray.operators.relational import Filter
from semray.operators.schema import ROW_ID
from semray.operators.semantic import SemJoin
from semray.planner.capabilities import added_columns, is_row_wise_semantic
from semray.planner.predicates import join_conjuncts, predicate_columns, split_conjuncts
from semray.planner.rules.context import EMPTY_CONTEXT, RuleContext


def push_filters_below_semantic(plan: Node, context: RuleContext = EMPTY_CONTEXT) -> Node:
    """Move relational filter conjuncts below the semantic operators they do not depend on."""
    return transform(plan, _push)


def _push(node: Node) -> Node:
    if not isinstance(node, Filter):
        return node
    child = node.input
    if is_row_wise_semantic(child):
        return _below_row_wise(node, child)
    if isinstance(child, SemJoin):
        return _into_join_sides(node, child)
    return node


def _below_row_wise(node: Filter, child: Node) -> Node:
    produced = added_columns(child)
    movable, kept = _partition(split_conjuncts(node.predicate), lambda read: not read & produced)
    if not movable:
        return node
    (grandchild,) = child.children
    pushed = child.with_children((_push(Filter(input=grandchild, predicate=join_conjuncts(movable))),))
    return Filter(input=pushed, predicate=join_conjuncts(kept)) if kept else pushed


def _into_join_sides(node: Filter, join: SemJoin) -> Node:
    left_names = frozenset(join.left.output_schema.names) - {ROW_ID}
    right_original = frozenset(join.right.output_schema.names) - {ROW_ID}
    # A right column keeps its name in the output unless it clashes with a left one.
    right_names = right_original - left_names
    to_left, rest = _partition(split_conjuncts(node.predicate), lambda read: bool(read) and read <= left_names)
    to_right, kept = _partition(rest, lambda read: bool(read) and read <= right_names)
    if not to_left and not to_right:
        return node
    left = _push(Filter(input=join.left, predicate=join_conjuncts(to_left))) if to_left else join.left
    right = _push(Filter(input=join.right, predicate=join_conjuncts(to_right))) if to_right else join.right
    joined = join.with_children((left, right))
    return Filter(input=joined, predicate=join_conjuncts(kept)) if kept else joined


def _partition(conjuncts: list[str], movable: Callable[[frozenset[str]], bool]) -> tuple[list[str], list[str]]:
    moved: list[str] = []
    kept: list[str] = []
    for conjunct in conjuncts:
        read = predicate_columns(conjunct)
        (moved if movable(read) else kept).append(conjunct)
    return moved, kept
