"""WHERE and HAVING: relational conjuncts -> Filter, ``SEM_FILTER`` -> SemFilter, subqueries -> semi/anti joins.

Relational conjuncts are applied first (cheap, and they shrink what the model reads),
then semi joins, then semantic filters in the order written. A conjunct that uses a
semantic function inside an expression (``SEM_FILTER(...) OR rating > 4``,
``SEM_SCORE(...) >= 4``) computes each call as a hidden column (a SemMap or
SemClassify) and then filters on the expression.
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from semray.operators import Filter, Node
from semray.sql.context import Context
from semray.sql.items import ExprScope, unique_name
from semray.sql.projection import SEMANTIC_COLUMNS, pending_calls, with_semantic_outputs
from semray.sql.rewrite import conjuncts, is_aggregate, outermost, plan_sql, semantic_name, to_sql
from semray.sql.semantic_calls import located, sem_column, sem_filter
from semray.sql.subqueries import exists_join, is_exists, semi_join


def apply_predicates(scope: ExprScope, condition: exp.Expr | None, context: Context, clause: str) -> ExprScope:
    """``scope`` with the conjuncts of ``condition`` (a WHERE or HAVING clause) applied."""
    if condition is None:
        return scope
    source = context.source
    relational: list[str] = []
    semantic: list[exp.Expr] = []
    memberships: list[exp.Expr] = []
    mixed: list[exp.Expr] = []
    for part in conjuncts(condition):
        if semantic_name(part) == "SEM_FILTER":
            semantic.append(part)
        elif isinstance(part, exp.In) and part.args.get("query") is not None:
            memberships.append(part)
        elif is_exists(part):
            if scope.replace is not None:
                raise source.unsupported(part, f"EXISTS in {clause}", "use EXISTS in WHERE")
            memberships.append(part)
        elif outermost(part, lambda node: semantic_name(node) in SEMANTIC_COLUMNS):
            mixed.append(part)
        else:
            if scope.replace is None and any(is_aggregate(node) for node in part.walk() if isinstance(node, exp.Expr)):
                raise source.unsupported(part, f"an aggregate in {clause}", "filter aggregates in HAVING")
            relational.append(plan_sql(part, scope.relation, source, scope.replace))
    node = scope.node
    if relational:
        predicate = relational[0] if len(relational) == 1 else " AND ".join(f"({text})" for text in relational)
        with located(condition, source):
            node = Filter(input=node, predicate=predicate)
    for membership in memberships:
        if isinstance(membership, exp.In):
            node = semi_join(node, membership, scope, context)
        else:
            node = exists_join(node, membership, scope, context)
    for call in semantic:
        node = sem_filter(node, call, scope.relation, source)
    computed = dict(scope.semantic_columns)
    for part in mixed:
        node = filter_on_semantic_columns(node, part, scope, context, computed)
    return replace(scope, node=node, semantic_columns=tuple(computed.items()))


def filter_on_semantic_columns(
    node: Node, part: exp.Expr, scope: ExprScope, context: Context, outputs: dict[str, str]
) -> Node:
    """``SEM_SCORE('...', 1, 5) >= 4``: compute each call as a hidden column, then Filter on the expression.

    ``outputs`` maps calls computed so far to their columns; new ones are added to it.
    """
    source = context.source
    for call in pending_calls(part, scope.replace):
        key = to_sql(call)
        if key not in outputs:
            name = unique_name("_sem0", {n.lower() for n in node.output_schema.names})
            node = sem_column(node, call, name, scope.relation, source)
            outputs[key] = name
    predicate = plan_sql(part, scope.relation, source, with_semantic_outputs(scope.replace, outputs))
    with located(part, source):
        return Filter(input=node, predicate=predicate)
