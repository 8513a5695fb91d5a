"""Rule 8: an identical semantic expression is computed once.

Precondition: a row-wise semantic operator (no diagnostics) with, somewhere below it along a
chain of operators that pass every input column through unchanged (filters, sorts, limits,
row-wise semantic operators, top-k), an operator of the same signature: same operator, same
template over the same columns, same tier, same arguments (labels, type, range, ``on_error``).

* A repeated ``SemFilter`` is removed: every row reaching it already passed the same test.
* A repeated map or classify becomes a ``Project`` copying the earlier output column under
  the later one's name.

Why results are preserved: the operators between pass the template's columns through
unchanged, so the later operator would render the same prompt for each row that the earlier
one answered, and a deterministic tier (pinned tier, keyed simulator, response cache) gives the
same answer.

Not covered: the same expression in two branches of a join or union (the plan is a tree, not
a DAG; the response cache answers the second one), and extractions (a repeated extraction
would produce columns with the names the first already has).

Before::

    SemMap '{review} summary' -> short
    └─ Filter rating > 3
       └─ SemMap '{review} summary' -> summary

After::

    Project ..., summary AS short
    └─ Filter rating > 3
       └─ SemMap '{review} summary' -> summary
"""

from __future__ import annotations

from semray.operators.base import Node, transform
from semray.operators.relational import NamedExpr, Project
from semray.operators.schema import ROW_ID
from semray.operators.semantic import SemanticNode, is_row_semantic
from semray.planner.capabilities import column_expression, passes_input_columns, semantic_signature
from semray.planner.rules.context import EMPTY_CONTEXT, RuleContext
from semray.tasks import TaskKind


def share_semantic_expressions(plan: Node, context: RuleContext = EMPTY_CONTEXT) -> Node:
    """Replace a repeated semantic filter, map or classify by the earlier one's result."""
    return transform(plan, _share)


def _share(node: Node) -> Node:
    if not is_row_semantic(node) or node.diagnostics or node.task_kind() == TaskKind.EXTRACT:
        return node
    earlier = _earlier_twin(node)
    if earlier is None:
        return node
    if node.drops_rows_only():
        return node.input
    ((output, _),) = node.output_types()
    ((shared, _),) = _outputs(earlier)
    names = [name for name in node.input.output_schema.names if name != ROW_ID]
    exprs = [NamedExpr(name=name, expr=column_expression(name)) for name in names]
    exprs.append(NamedExpr(name=output, expr=column_expression(shared)))
    return Project(input=node.input, exprs=tuple(exprs))


def _earlier_twin(node: Node) -> Node | None:
    signature = semantic_signature(node)
    current = node.children[0]
    while passes_input_columns(current):
        if semantic_signature(current) == signature and _output_visible(current, node):
            return current
        current = current.children[0]
    return None


def _output_visible(earlier: Node, later: Node) -> bool:
    """The earlier operator's output still reaches the later one's input."""
    names = later.children[0].output_schema.names
    return all(name in names for name, _ in _outputs(earlier))


def _outputs(node: Node) -> tuple[tuple[str, str], ...]:
    return node.output_types() if isinstance(node, SemanticNode) else ()
