"""The SELECT list, DISTINCT, ORDER BY and LIMIT of one SELECT: Project, Distinct, Sort, Limit.

Semantic calls in the SELECT list become semantic nodes below the Project, each writing
its own column (named by the item's alias when the call is the whole item); after
GROUP BY, calls already answered below the Aggregate (inside aggregates, group keys) are
read from its columns instead. ORDER BY
keys that are not output columns are computed as hidden columns and dropped after the
Sort and Limit. A Project that would only repeat its input's columns is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from semray.operators import Distinct, Limit, NamedExpr, Node, Project, Sort, SortKey
from semray.operators.code import SemCode
from semray.sql.context import Context
from semray.sql.diagnostics import QueryText
from semray.sql.items import ExprScope, SelectItem, unique_name
from semray.sql.literals import INT64_MAX, integer_literal, shown
from semray.sql.rewrite import Replacement, is_aggregate, outermost, plan_column, plan_sql, semantic_name, to_sql
from semray.sql.semantic_calls import located, sem_code, sem_column, sem_extract

SEMANTIC_COLUMNS = ("SEM_FILTER", "SEM_MAP", "SEM_SCORE", "SEM_CLASSIFY")


@dataclass(frozen=True, slots=True)
class Output:
    """Compiled SELECT list: the node below the Project and the output columns."""

    node: Node
    exprs: tuple[NamedExpr, ...]
    replace: Replacement | None


def compile_items(
    scope: ExprScope, items: Sequence[SelectItem], context: Context, order: Sequence[exp.Expr] = ()
) -> Output:
    """Semantic nodes for the SEM_* calls of the SELECT list (and of ORDER BY keys), then one
    NamedExpr per output column."""
    source = context.source
    node = scope.node
    outputs: dict[str, str] = dict(scope.semantic_columns)
    reserved = {item.name.lower() for item in items if not item.is_extract}
    sources = [(item.expression, item) for item in items if not item.is_extract] + [(key, None) for key in order]
    for expression, item in sources:
        for call in pending_calls(expression, scope.replace):
            key = to_sql(call)
            if key in outputs:
                continue
            whole = item is not None and item.expression is call and item.alias is not None
            taken = {name.lower() for name in node.output_schema.names} | {name.lower() for name in outputs.values()}
            name = (
                item.name
                if item is not None and whole and item.name.lower() not in taken
                else unique_name(f"_sem{len(outputs)}", taken | reserved)
            )
            node = sem_column(node, call, name, scope.relation, source)
            outputs[key] = name
    replace = with_semantic_outputs(scope.replace, outputs)
    exprs: list[NamedExpr] = []
    for item in items:
        if item.is_extract:
            build = sem_code if semantic_name(item.expression) == "SEM_CODE" else sem_extract
            extract = build(node, item.expression, scope.relation, source)
            node = extract
            fields = extract.outputs if isinstance(extract, SemCode) else extract.fields
            for field in fields:
                name = unique_name(field.name, reserved | {e.name.lower() for e in exprs})
                exprs.append(NamedExpr(name=name, expr=to_sql(plan_column(field.name))))
            continue
        exprs.append(NamedExpr(name=item.name, expr=plan_sql(item.expression, scope.relation, source, replace)))
    return Output(node, tuple(exprs), replace)


def is_semantic_column(node: exp.Expr) -> bool:
    """A call computed as a column: ``SEM_FILTER``, ``SEM_MAP``, ``SEM_SCORE`` or ``SEM_CLASSIFY``."""
    return semantic_name(node) in SEMANTIC_COLUMNS


def pending_calls(expression: exp.Expr, replace: Replacement | None) -> list[exp.Expr]:
    """The outermost semantic column calls of ``expression`` still to compute on the current node.

    Calls inside a subexpression that ``replace`` turns into a column were computed below
    the Aggregate (``avg(SEM_SCORE(...))``, a ``SEM_CLASSIFY`` group key) and are skipped.
    Only aggregates and expressions holding a semantic call are offered to ``replace``.
    """

    def computed_below(node: exp.Expr) -> bool:
        return (
            replace is not None
            and (is_aggregate(node) or semantic_name(node) == "SEM_AGG" or _holds_semantic_column(node))
            and replace(node) is not None
        )

    return outermost(expression, is_semantic_column, skip=computed_below)


def _holds_semantic_column(node: exp.Expr) -> bool:
    return any(is_semantic_column(part) for part in node.walk() if isinstance(part, exp.Expr))


def with_semantic_outputs(replace: Replacement | None, outputs: dict[str, str]) -> Replacement | None:
    """``replace`` extended to turn each semantic call (keyed by its SQL) into its output column.

    A call not in ``outputs`` is left to ``replace`` (and refused by ``rewrite`` if it is not replaced).
    """
    if not outputs:
        return replace

    def substitute(node: exp.Expr) -> exp.Expr | None:
        if is_semantic_column(node) and to_sql(node) in outputs:
            return plan_column(outputs[to_sql(node)])
        return replace(node) if replace is not None else None

    return substitute


def finish_select(
    scope: ExprScope, output: Output, items: Sequence[SelectItem], select: exp.Select, context: Context
) -> Node:
    """Project, then DISTINCT, ORDER BY, LIMIT/OFFSET, and drop hidden sort columns."""
    source = context.source
    exprs = list(output.exprs)
    distinct = select.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        raise source.unsupported(distinct, "DISTINCT ON", "use GROUP BY with an aggregate such as any_value() or min()")
    keys: list[SortKey] = []
    hidden: list[NamedExpr] = []
    order = select.args.get("order")
    for ordered in order.expressions if order is not None else []:
        column = output_column(ordered.this, exprs, items, source)
        if column is None:
            text = plan_sql(ordered.this, scope.relation, source, output.replace)
            column = next((e.name for e in exprs if e.expr == text), None)
        if column is None:
            if distinct is not None:
                raise source.unsupported(
                    ordered, "ORDER BY an expression that is not selected, with SELECT DISTINCT", "select it too"
                )
            taken = {e.name.lower() for e in exprs + hidden}
            column = unique_name(f"_order{len(hidden)}", taken)
            hidden.append(NamedExpr(name=column, expr=text))
        keys.append(sort_key(column, ordered))
    node = project(output.node, tuple(exprs + hidden), select, source)
    if distinct is not None:
        node = Distinct(input=node)
    node = order_and_limit(node, keys, select, source)
    if hidden:
        node = project(
            node, tuple(NamedExpr(name=e.name, expr=to_sql(plan_column(e.name))) for e in exprs), select, source
        )
    return node


def output_column(
    expression: exp.Expr, exprs: Sequence[NamedExpr], items: Sequence[SelectItem], source: QueryText
) -> str | None:
    """The output column an ORDER BY key names by position (``1``) or by output name."""
    if isinstance(expression, exp.Literal) and not expression.is_string:
        index = integer_literal(expression)
        if index is None or not 1 <= index <= len(exprs):
            where = f"ORDER BY {shown(expression)}"
            raise source.unsupported(expression, where, f"use a position between 1 and {len(exprs)}")
        return exprs[index - 1].name
    if isinstance(expression, exp.Column) and not expression.table:
        named = [e.name for e in exprs if e.name == expression.name] or [
            e.name for e in exprs if e.name.lower() == expression.name.lower()
        ]
        aliased = [item.name for item in items if item.alias is not None and item.name in named]
        if aliased or len(named) == 1:
            return (aliased or named)[0]
    return None


def sort_key(column: str, ordered: exp.Ordered) -> SortKey:
    # sqlglot reads DuckDB's default (NULLS LAST both ways) and an explicit NULLS LAST alike;
    # the plan's default (None) means the same, so only NULLS FIRST is spelled out.
    nulls_first = True if ordered.args.get("nulls_first") else None
    return SortKey(column=column, descending=bool(ordered.args.get("desc")), nulls_first=nulls_first)


def project(node: Node, exprs: tuple[NamedExpr, ...], at: exp.Expr, source: QueryText) -> Node:
    """A Project of ``exprs`` over ``node``, or ``node`` itself when it would change nothing."""
    current = node.output_schema.user_columns()
    if len(current) == len(exprs) and all(
        c.name == e.name and e.expr == to_sql(plan_column(c.name)) for c, e in zip(current, exprs, strict=True)
    ):
        return node
    with located(at, source):
        return Project(input=node, exprs=exprs)


def order_and_limit(node: Node, keys: Sequence[SortKey], query: exp.Expr, source: QueryText) -> Node:
    if keys:
        node = Sort(input=node, keys=tuple(keys))
    count = _bound(query.args.get("limit"), source)
    offset = _bound(query.args.get("offset"), source)
    if count is not None or offset is not None:
        # OFFSET alone, or a huge count: one that keeps offset + count within a signed 64-bit integer.
        count = INT64_MAX - (offset or 0) if count is None else min(count, INT64_MAX - (offset or 0))
        node = Limit(input=node, count=count, offset=offset or 0)
    return node


def _bound(clause: exp.Expr | None, source: QueryText) -> int | None:
    if clause is None:
        return None
    if isinstance(clause, exp.Fetch):
        raise source.unsupported(clause, "FETCH FIRST", "use LIMIT n")
    value = clause.args.get("expression")
    bound = integer_literal(value)
    if bound is not None:
        return bound
    text = to_sql(clause).strip()
    text = text if len(text) <= 40 else text[:40] + "..."
    raise source.unsupported(
        clause,
        f"the bound {text!r}",
        f"use a non-negative integer literal of at most {INT64_MAX} (64 bits), e.g. LIMIT 10 OFFSET 20",
    )
