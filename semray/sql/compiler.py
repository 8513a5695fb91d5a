"""Compile SQL with ``SEM_*`` functions into a logical plan.

>>> query = "SELECT title FROM docs WHERE SEM_FILTER('{body} is about Ray')"
>>> plan = compile_sql(query, {"docs": scan})  # doctest: +SKIP
>>> render_tree(plan)  # doctest: +SKIP
Project title
  SemFilter '{body} is about Ray'
    Scan memory:docs
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import duckdb
from sqlglot import exp

from semray.errors import PlanError
from semray.operators import Distinct, NamedExpr, Node, Project, SortKey, Union
from semray.operators.schema import quote
from semray.sql.aggregation import aggregate, needs_aggregation
from semray.sql.context import Context
from semray.sql.diagnostics import QueryText, UnsupportedSqlError
from semray.sql.items import ExprScope, alias_expressions, select_items, substitute_aliases
from semray.sql.limits import check_plan_depth, too_complex
from semray.sql.literals import integer_literal
from semray.sql.parse import parse_query
from semray.sql.predicates import apply_predicates
from semray.sql.projection import compile_items, finish_select, order_and_limit, sort_key
from semray.sql.relations import compile_from
from semray.sql.rewrite import plan_column, to_sql
from semray.sql.semantic_calls import located

_UNSUPPORTED_SELECT_PARTS = {
    "qualify": ("QUALIFY", "filter in an outer query"),
    "windows": ("WINDOW", "window functions are not supported"),
    "into": ("SELECT INTO", "give a plain SELECT"),
    "pivots": ("PIVOT", "aggregate with GROUP BY"),
    "sample": ("TABLESAMPLE", "use LIMIT"),
    "connect": ("CONNECT BY", "use joins"),
    "locks": ("FOR UPDATE", "give a plain SELECT"),
    "prewhere": ("PREWHERE", "use WHERE"),
    "cluster": ("CLUSTER BY", "use ORDER BY"),
    "distribute": ("DISTRIBUTE BY", "use ORDER BY"),
    "sort": ("SORT BY", "use ORDER BY"),
}


_PARENTHESIZED_PARTS = frozenset({"this", "alias", "with_", "order", "limit", "offset"})
"""What a parenthesized query, ``(SELECT ...) ORDER BY ... LIMIT ...``, may carry: anything else
there (a WHERE, a TABLESAMPLE) is refused, not dropped."""


def compile_sql(query: str, tables: Mapping[str, Node]) -> Node:
    """Compile ``query`` over named input plans into one logical plan.

    ``tables`` maps each table name the query may use to the plan producing it (a Scan,
    or any node); every node's schema starts with ``_rowid``. Raises SqlSyntaxError,
    UnsupportedSqlError (SqlLimitError past a size limit), TableNotFoundError, ColumnNotFoundError
    or another PlanError.
    """
    try:
        tree = parse_query(query)
        context = Context(source=QueryText(query), tables=dict(tables), compile_query=compile_query)
        plan = compile_query(tree, context)
    except RecursionError:
        # The limits in semray.sql.limits keep queries shallow; this is the backstop for a caller
        # that is already deep in its own stack.
        raise too_complex() from None
    check_plan_depth(plan, context.source)
    return plan


def compile_query(query: exp.Expr, context: Context) -> Node:
    """A query (SELECT, set operation, parenthesized query) with its WITH clause."""
    source = context.source
    with_clause = query.args.get("with_")
    if with_clause is not None:
        if with_clause.args.get("recursive"):
            raise source.unsupported(with_clause, "WITH RECURSIVE", "use non-recursive CTEs")
        for cte in with_clause.expressions:
            node = context.compile(cte.this)
            names = [column.name for column in cte.args["alias"].columns] if cte.args.get("alias") else []
            if names:
                node = _rename(node, names, cte, context)
            check_plan_depth(node, source, cte)  # a chain of WITH clauses stops at the first too deep
            context = context.with_cte(cte.alias, node)
    if isinstance(query, exp.Select):
        return compile_select(query, context)
    if isinstance(query, exp.Union):
        return compile_union(query, context)
    if isinstance(query, exp.Subquery):
        extra = [key for key, value in query.args.items() if value and key not in _PARENTHESIZED_PARTS]
        if extra:
            what, instead = _UNSUPPORTED_SELECT_PARTS.get(extra[0], (extra[0].upper(), "put it inside the parentheses"))
            raise source.unsupported(query, f"{what} after a parenthesized query", instead)
        return _with_modifiers(compile_query(query.this, context), query, context)
    if isinstance(query, exp.Intersect | exp.Except):
        raise source.unsupported(query, query.key.upper(), "use UNION [ALL], or a semi join: WHERE x IN (SELECT ...)")
    raise source.unsupported(query, f"the query form {query.key.upper()}", "give a SELECT")


def compile_select(select: exp.Select, context: Context) -> Node:
    source = context.source
    for part, (what, instead) in _UNSUPPORTED_SELECT_PARTS.items():
        if select.args.get(part):
            raise source.unsupported(
                select.args[part] if isinstance(select.args[part], exp.Expr) else select, what, instead
            )
    relation = compile_from(select, context)
    aliases = alias_expressions(select)
    where, having = (select.args.get(clause) for clause in ("where", "having"))
    where = substitute_aliases(where.this, aliases, relation) if where is not None else None
    having = substitute_aliases(having.this, aliases, relation) if having is not None else None
    scope = apply_predicates(ExprScope(relation.node, relation), where, context, "WHERE")
    relation = relation.with_node(scope.node)
    items = select_items(select, relation, source)
    if not items:
        raise source.unsupported(select, "an empty SELECT list", "select at least one column")
    order = select.args.get("order")
    if needs_aggregation(select, items):
        extra = [having] if having is not None else []
        extra += [ordered.this for ordered in order.expressions] if order is not None else []
        scope = aggregate(relation, items, select, extra, context, scope.semantic_columns)
        scope = apply_predicates(scope, having, context, "HAVING")
    output = compile_items(scope, items, context, [ordered.this for ordered in order.expressions] if order else [])
    return finish_select(scope, output, items, select, context)


def compile_union(union: exp.Union, context: Context) -> Node:
    """UNION ALL -> Union; UNION -> Distinct(Union); branches aligned to the first's names and common types."""
    source = context.source
    if union.args.get("by_name") or union.args.get("side") or union.args.get("kind") or union.args.get("on"):
        raise source.unsupported(
            union, "UNION BY NAME / outer unions", "use UNION [ALL] with columns in the same order"
        )
    distinct = bool(union.args.get("distinct"))
    branches = _branches(union, distinct)
    nodes = [context.compile(branch) for branch in branches]
    columns = [node.output_schema.user_columns() for node in nodes]
    width = len(columns[0])
    for position, branch_columns in enumerate(columns[1:], start=2):
        if len(branch_columns) != width:
            raise UnsupportedSqlError(
                f"UNION branch {position} has {len(branch_columns)} columns, branch 1 has {width}"
                f" (at {source.locate(branches[position - 1])});"
                " select the same number of columns in each branch"
            )
    names = [column.name for column in columns[0]]
    types = [common_type(tuple(branch[i].type for branch in columns)) for i in range(width)]
    aligned: list[Node] = []
    for node, branch_columns, branch in zip(nodes, columns, branches, strict=True):
        if [c.name for c in branch_columns] == names and [c.type for c in branch_columns] == types:
            aligned.append(node)
            continue
        exprs = []
        for column, name, kind in zip(branch_columns, names, types, strict=True):
            reference = to_sql(plan_column(column.name))
            exprs.append(
                NamedExpr(name=name, expr=reference if column.type == kind else f"CAST({reference} AS {kind})")
            )
        with located(branch, source):
            aligned.append(Project(input=node, exprs=tuple(exprs)))
    with located(union, source):
        combined: Node = Union(inputs=tuple(aligned))
    if distinct:
        combined = Distinct(input=combined)
    return _with_modifiers(combined, union, context)


def _branches(union: exp.Union, distinct: bool) -> list[exp.Expr]:
    """Flatten ``a UNION ALL b UNION ALL c`` (same kind, no modifiers of their own) into its branches."""
    branches: list[exp.Expr] = []
    for side in (union.this, union.expression):
        nested = side.unnest() if isinstance(side, exp.Subquery) and not _has_modifiers(side) else side
        if (
            isinstance(nested, exp.Union)
            and bool(nested.args.get("distinct")) == distinct
            and not _has_modifiers(nested)
        ):
            branches.extend(_branches(nested, distinct))
        else:
            branches.append(side)
    return branches


def _has_modifiers(query: exp.Expr) -> bool:
    return any(query.args.get(key) for key in ("order", "limit", "offset", "with_"))


def _with_modifiers(node: Node, query: exp.Expr, context: Context) -> Node:
    """ORDER BY / LIMIT attached to a set operation or parenthesized query: by output name or position."""
    source = context.source
    names = [column.name for column in node.output_schema.user_columns()]
    keys: list[SortKey] = []
    order = query.args.get("order")
    for ordered in order.expressions if order is not None else []:
        key = ordered.this
        position = integer_literal(key)
        if position is not None and 1 <= position <= len(names):
            keys.append(sort_key(names[position - 1], ordered))
            continue
        matches = [name for name in names if isinstance(key, exp.Column) and name.lower() == key.name.lower()]
        if len(matches) != 1:
            raise source.unsupported(
                key,
                f"ORDER BY {to_sql(key)!r} after a set operation",
                f"order by output columns ({', '.join(names)}) or positions",
            )
        keys.append(sort_key(matches[0], ordered))
    return order_and_limit(node, keys, query, source)


def _rename(node: Node, names: list[str], at: exp.Expr, context: Context) -> Node:
    columns = node.output_schema.user_columns()
    if len(names) > len(columns):
        raise context.source.unsupported(
            at, f"{len(names)} column names for {len(columns)} columns", "give at most one name per column"
        )
    renamed = names + [column.name for column in columns[len(names) :]]
    exprs = tuple(
        NamedExpr(name=name, expr=to_sql(plan_column(column.name)))
        for name, column in zip(renamed, columns, strict=True)
    )
    with located(at, context.source):
        return Project(input=node, exprs=exprs)


@functools.lru_cache(maxsize=1024)
def common_type(types: tuple[str, ...]) -> str:
    """The type DuckDB gives a UNION column whose branches have ``types``.

    >>> common_type(("INTEGER", "BIGINT"))
    'BIGINT'
    """
    if len(set(types)) == 1:
        return types[0]
    branches = " UNION ALL ".join(f"SELECT NULL::{kind} AS {quote('value')}" for kind in types)
    connection = duckdb.connect()
    try:
        return str(connection.execute(f"DESCRIBE {branches}").fetchall()[0][1])
    except duckdb.Error as error:
        raise PlanError(
            f"UNION columns of types {', '.join(types)} have no common type: {str(error).splitlines()[0]}"
        ) from None
    finally:
        connection.close()
