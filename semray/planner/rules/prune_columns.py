"""Rule 6: drop columns nothing downstream reads, and semantic operators nobody needs.

Precondition: none; it applies to any plan. It walks the plan from the root with the set of
columns each node's parent needs:

* a ``Scan`` reads only needed columns (its pushed-down projection);
* a ``Project`` drops expressions nobody reads;
* a map, extract or classify none of whose outputs is needed, and that keeps every row
  (``on_error`` not ``skip``), is removed: its answers would be thrown away; an extraction
  some of whose fields are needed asks for those fields only (the per-field assumption of
  rule 3);
* below every semantic operator whose input carries unneeded columns, a ``Project`` keeps
  only what the operator and the nodes above it read, so the rows shipped to model actors
  (and rendered into set-level prompts) carry only what they need.

Joins whose right side has a column renamed for a clash (``_right``) are left whole: dropping
a left column would change the right column's name.

Why results are preserved: every column a node or its ancestors read is kept, and a removed
operator adds only columns nobody reads while keeping every row. The root's columns are all
needed, so the output schema does not change.

Before::

    Project summary
    └─ SemMap '{review}' -> summary
       └─ SemClassify '{review}' -> sentiment
          └─ Scan reviews (review, rating, product)

After::

    Project summary
    └─ SemMap '{review}' -> summary
       └─ Scan reviews columns=['review']
"""

from __future__ import annotations

from semray.operators.base import Node
from semray.operators.relational import Aggregate, Distinct, Join, NamedExpr, Project, Scan, Unary, Union
from semray.operators.schema import ROW_ID
from semray.operators.semantic import SemAgg, SemExtract, SemJoin
from semray.planner.capabilities import (
    added_columns,
    column_expression,
    is_row_wise_semantic,
    keeps_every_row,
    rebuild,
)
from semray.planner.rules.context import EMPTY_CONTEXT, RuleContext

Needed = frozenset[str]


def prune_columns(plan: Node, context: RuleContext = EMPTY_CONTEXT) -> Node:
    """Keep only the columns some ancestor reads; drop unneeded row-preserving semantic operators."""
    return _prune(plan, frozenset(plan.output_schema.names))


def _prune(node: Node, needed: Needed) -> Node:
    if isinstance(node, Scan):
        return _narrow_scan(node, needed)
    if isinstance(node, Project):
        node = _narrow_project(node, needed)
    elif is_row_wise_semantic(node) and keeps_every_row(node) and not added_columns(node) & needed:
        return _prune(node.children[0], needed)
    elif isinstance(node, SemExtract) and keeps_every_row(node) and not node.diagnostics:
        node = _narrow_extract(node, needed)
    requirements = _child_needs(node, needed)
    children = []
    for child, child_needed in zip(node.children, requirements, strict=True):
        pruned = _prune(child, child_needed)
        if node.calls_llm or isinstance(node, Union):
            pruned = _exactly(pruned, child_needed)
        children.append(pruned)
    return node.with_children(tuple(children))


def _child_needs(node: Node, needed: Needed) -> tuple[Needed, ...]:
    read = node.columns_read()
    if isinstance(node, Join | SemJoin):
        return _join_needs(node, needed, read)
    if isinstance(node, Project | Aggregate | SemAgg):
        return (read,)
    if isinstance(node, Distinct):
        return (frozenset(node.input.output_schema.names),)
    if isinstance(node, Union):
        if not needed - {ROW_ID}:  # every input must keep the same (non-empty) columns
            needed = needed | {node.output_schema.user_columns()[0].name}
        return tuple(needed for _ in node.inputs)
    if isinstance(node, Unary):
        return ((needed - added_columns(node)) | read,)
    return tuple(frozenset(child.output_schema.names) for child in node.children)


def _join_needs(node: Join | SemJoin, needed: Needed, read: Needed) -> tuple[Needed, ...]:
    left = frozenset(node.left.output_schema.names)
    right = frozenset(node.right.output_schema.names)
    if left & right - {ROW_ID}:
        return left, right  # a renamed right column: keep both sides whole
    wanted = needed | read
    return wanted & left, wanted & right


def _narrow_scan(node: Scan, needed: Needed) -> Node:
    current = node.output_schema.user_columns()
    kept = tuple(column.name for column in current if column.name in needed) or (current[0].name,)
    if len(kept) == len(current):
        return node
    return rebuild(node, columns=kept)


def _narrow_extract(node: SemExtract, needed: Needed) -> Node:
    kept = tuple(field for field in node.fields if field.name in needed)
    return node if len(kept) == len(node.fields) else rebuild(node, fields=kept)


def _narrow_project(node: Project, needed: Needed) -> Project:
    kept = tuple(item for item in node.exprs if item.name in needed) or node.exprs[:1]
    if len(kept) == len(node.exprs):
        return node
    narrowed = rebuild(node, exprs=kept)
    assert isinstance(narrowed, Project)
    return narrowed


def _exactly(node: Node, needed: Needed) -> Node:
    """``node`` with only the ``needed`` columns, in its order (a Project when it has more)."""
    names = [name for name in node.output_schema.names if name != ROW_ID]
    kept = [name for name in names if name in needed]
    if len(kept) == len(names) or not kept:
        return node
    if isinstance(node, Project):
        return _narrow_project(node, frozenset(kept))
    return Project(input=node, exprs=tuple(NamedExpr(name=name, expr=column_expression(name)) for name in kept))
