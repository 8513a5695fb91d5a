"""Subqueries in WHERE as joins: ``x IN (SELECT y ...)`` -> semi join; ``[NOT] EXISTS (SELECT ...
WHERE inner.col = outer.col ...)`` -> semi (anti) join on the correlating equalities."""

from __future__ import annotations

from sqlglot import exp

from semray.operators import Join, Node
from semray.sql.context import Context
from semray.sql.items import ExprScope
from semray.sql.relations import compile_from
from semray.sql.rewrite import conjuncts, plan_column, plan_sql, to_sql
from semray.sql.scope import Relation
from semray.sql.semantic_calls import located

_NOT_CORRELATABLE = ("group", "having", "limit", "offset", "order", "distinct", "with_", "qualify")


def is_exists(part: exp.Expr) -> bool:
    """``EXISTS (...)`` or ``NOT EXISTS (...)``."""
    return isinstance(part, exp.Exists) or (isinstance(part, exp.Not) and isinstance(part.this, exp.Exists))


def semi_join(node: Node, membership: exp.In, scope: ExprScope, context: Context) -> Node:
    """``x IN (SELECT y FROM ...)`` -> a semi join of the rows so far with the subquery on ``x = y``."""
    source = context.source
    subquery = membership.args["query"]
    query = subquery.this if isinstance(subquery, exp.Subquery) else subquery
    probe = plan_sql(membership.this, scope.relation, source, scope.replace)
    right = context.compile(query)
    columns = right.output_schema.user_columns()
    if len(columns) != 1:
        raise source.unsupported(
            subquery, f"an IN subquery with {len(columns)} columns", "select exactly one column in it"
        )
    probe_tree: exp.Expr = exp.maybe_parse(probe, dialect="duckdb")
    if not isinstance(probe_tree, exp.Column):
        raise source.unsupported(
            membership.this, "IN (SELECT ...) on an expression", "compute it as a column in a subquery first"
        )
    condition = f"{to_sql(plan_column(probe_tree.name, table='l'))} = {to_sql(plan_column(columns[0].name, table='r'))}"
    with located(membership, source):
        return Join(left=node, right=right, kind="semi", on=condition)


def exists_join(node: Node, part: exp.Expr, scope: ExprScope, context: Context) -> Node:
    """``[NOT] EXISTS (SELECT ... FROM t WHERE t.k = outer.k AND ...)`` -> semi (anti) join on ``k``.

    The subquery's conjuncts that equate one of its columns with an outer column become
    the join keys; the others stay in the subquery. NOT EXISTS is exactly an anti join:
    a NULL key matches nothing, so the outer row is kept.
    """
    source = context.source
    negated = isinstance(part, exp.Not)
    exists = part.this if negated else part
    query = exists.this.unnest() if isinstance(exists.this, exp.Subquery) else exists.this
    if not isinstance(query, exp.Select) or any(query.args.get(key) for key in _NOT_CORRELATABLE):
        raise source.unsupported(
            exists, "EXISTS over a grouped, ordered, limited or set-operation subquery", "use a plain SELECT ... WHERE"
        )
    inner = compile_from(query, context)
    where = query.args.get("where")
    keys: list[tuple[str, exp.Column]] = []
    rest: list[exp.Expr] = []
    for conjunct in conjuncts(where.this) if where is not None else []:
        pair = _correlation(conjunct, inner, scope, context)
        if pair is None:
            rest.append(conjunct)
        else:
            keys.append(pair)
    if not keys:
        raise source.unsupported(
            exists,
            "EXISTS without a correlation",
            "correlate it with inner.column = outer.column, or use IN (SELECT ...)",
        )
    rewritten = query.copy()
    rewritten.set("expressions", [exp.alias_(column.copy(), f"_key{i}") for i, (_, column) in enumerate(keys)])
    rewritten.set("where", exp.Where(this=exp.and_(*rest)) if rest else None)
    right = context.compile(rewritten)
    condition = " AND ".join(
        f"{to_sql(plan_column(outer, table='l'))} = {to_sql(plan_column(f'_key{i}', table='r'))}"
        for i, (outer, _) in enumerate(keys)
    )
    with located(exists, source):
        return Join(left=node, right=right, kind="anti" if negated else "semi", on=condition)


def _correlation(
    conjunct: exp.Expr, inner: Relation, scope: ExprScope, context: Context
) -> tuple[str, exp.Column] | None:
    """(outer plan column, inner column) when ``conjunct`` is ``inner.col = outer.col`` (either order)."""
    if not isinstance(conjunct, exp.EQ):
        return None
    sides = (conjunct.this, conjunct.expression)
    if not all(isinstance(side, exp.Column) and not isinstance(side.this, exp.Star) for side in sides):
        return None
    for mine, theirs in (sides, sides[::-1]):
        assert isinstance(mine, exp.Column) and isinstance(theirs, exp.Column)
        if _resolves(mine, inner) and not _resolves(theirs, inner) and _resolves(theirs, scope.relation):
            return scope.relation.resolve(theirs, context.source).plan_name, mine
    return None


def _resolves(column: exp.Column, relation: Relation) -> bool:
    qualifier = column.table or None
    if qualifier is not None and not relation.has_qualifier(qualifier):
        return False
    return relation.find(column.name, qualifier) is not None
