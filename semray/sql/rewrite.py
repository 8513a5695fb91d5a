"""Rewrite query expressions into plan expressions: SQL over plan column names.

A plan's expressions are DuckDB SQL over the unqualified column names of the node's
input. Query expressions name columns as the user sees them (``r.id``, ``ID``); this
module resolves each reference and prints the expression back in the DuckDB dialect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from sqlglot import exp

from semray.sql.diagnostics import QueryText
from semray.sql.parse import DIALECT
from semray.sql.scope import Relation

TABLE_FUNCTIONS = ("SEM_TOPK", "SEM_SEARCH")
"""Semantic functions that stand in FROM (``table_functions.py``), never inside an expression."""
SEMANTIC_FUNCTIONS = (
    "SEM_FILTER",
    "SEM_MAP",
    "SEM_SCORE",
    "SEM_EXTRACT",
    "SEM_CLASSIFY",
    "SEM_AGG",
    "SEM_MATCH",
    "SEM_CODE",
)
EXPANDING_FUNCTIONS = ("SEM_EXTRACT", "SEM_CODE")
"""Whole SELECT items that expand to one column per field."""

Replacement = Callable[[exp.Expr], exp.Expr | None]
"""Substitutes a whole subexpression (an aggregate, a group key) or returns None to descend."""


def semantic_name(node: exp.Expr) -> str | None:
    """``SEM_MAP`` for a ``sem_map(...)`` call, None for anything else."""
    if isinstance(node, exp.Anonymous) and isinstance(node.this, str) and node.this.upper() in SEMANTIC_FUNCTIONS:
        return node.this.upper()
    return None


_AGGREGATE_WRAPPERS = (exp.IgnoreNulls, exp.RespectNulls, exp.Filter, exp.WithinGroup)


def is_aggregate(node: exp.Expr) -> bool:
    """A relational aggregate call such as ``count(*)``, ``any_value(x)``, ``sum(x) FILTER (WHERE ...)``.

    A wrapped call counts once, as its wrapper.
    """
    if isinstance(node, _AGGREGATE_WRAPPERS):
        inner = node.this
        return isinstance(inner, exp.AggFunc) or (isinstance(inner, _AGGREGATE_WRAPPERS) and is_aggregate(inner))
    return isinstance(node, exp.AggFunc) and not isinstance(node.parent, _AGGREGATE_WRAPPERS)


def outermost(
    expression: exp.Expr, wanted: Callable[[exp.Expr], bool], skip: Callable[[exp.Expr], bool] | None = None
) -> list[exp.Expr]:
    """Subexpressions satisfying ``wanted`` that are not inside another such one, nor in a subquery,
    nor in a subexpression ``skip`` says to leave alone."""
    found: list[exp.Expr] = []

    def visit(node: exp.Expr) -> None:
        if skip is not None and skip(node):
            return
        if wanted(node):
            found.append(node)
            return
        if isinstance(node, exp.Query | exp.Subquery | exp.Exists):
            return  # a subquery's calls belong to the subquery
        for child in node.iter_expressions():
            visit(child)

    visit(expression)
    return found


def conjuncts(expression: exp.Expr) -> list[exp.Expr]:
    """``a AND (b AND c)`` -> [a, b, c]; parentheses around a conjunct are dropped."""
    node = expression.unnest() if isinstance(expression, exp.Paren) else expression
    if isinstance(node, exp.And):
        return conjuncts(cast(exp.Expr, node.this)) + conjuncts(cast(exp.Expr, node.expression))
    return [node]


def plan_column(name: str, table: str | None = None) -> exp.Column:
    """A reference to plan column ``name`` (quoted when DuckDB needs it), e.g. ``l."my col"``."""
    return exp.column(name, table=table)


def to_sql(expression: exp.Expr) -> str:
    return expression.sql(dialect=DIALECT)


def rewrite(
    expression: exp.Expr,
    column: Callable[[exp.Column], exp.Expr],
    source: QueryText,
    replace: Replacement | None = None,
) -> exp.Expr:
    """A copy of ``expression`` with subexpressions replaced and column references resolved.

    Raises for constructs that have no place inside a plan expression (windows,
    subqueries, semantic functions outside their clause).
    """

    for call in expression.find_all(exp.Anonymous):
        if isinstance(call.this, str) and call.this.upper() in TABLE_FUNCTIONS:
            name = call.this.upper()
            raise source.unsupported(
                call, f"{name} inside an expression", f"{name} is a table function: write FROM {name}(table, ...)"
            )

    def visit(node: exp.Expr) -> exp.Expr:
        substitute = replace(node) if replace is not None else None
        if substitute is not None:
            return substitute
        reject_unsupported(node, source)
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            return column(node)
        return node

    return expression.copy().transform(visit)


def reject_unsupported(node: exp.Expr, source: QueryText) -> None:
    name = semantic_name(node)
    if name is not None:
        raise source.unsupported(node, f"{name} here", _SEMANTIC_PLACES[name])
    if isinstance(node, exp.Window):
        raise source.unsupported(node, "a window function (OVER)", "aggregate with GROUP BY and join the result back")
    if isinstance(node, exp.Subquery | exp.Select | exp.Exists) or (
        isinstance(node, exp.In) and node.args.get("query")
    ):
        raise source.unsupported(
            node,
            "a subquery inside an expression",
            "use a subquery in FROM, a WITH clause, or 'column IN (SELECT ...)' in WHERE",
        )
    if isinstance(node, exp.Placeholder | exp.Parameter):
        raise source.unsupported(node, "a query parameter", "write the value into the query")
    if isinstance(node, exp.Star) and not isinstance(node.parent, exp.Count | exp.Column):
        raise source.unsupported(node, "'*' inside an expression", "name the columns")


_COLUMN_PLACES = "the SELECT list (also inside aggregates), GROUP BY, ORDER BY, WHERE or HAVING; not in JOIN ... ON"
_SEMANTIC_PLACES = {
    "SEM_FILTER": f"use SEM_FILTER in {_COLUMN_PLACES}",
    "SEM_MAP": f"use SEM_MAP in {_COLUMN_PLACES}",
    "SEM_SCORE": f"use SEM_SCORE in {_COLUMN_PLACES}",
    "SEM_EXTRACT": "use SEM_EXTRACT as a whole SELECT item; it expands to its fields",
    "SEM_CODE": "use SEM_CODE as a whole SELECT item; it expands to its output fields",
    "SEM_CLASSIFY": f"use SEM_CLASSIFY in {_COLUMN_PLACES}",
    "SEM_AGG": "use SEM_AGG as an aggregate in the SELECT list of a grouped query",
    "SEM_MATCH": "use SEM_MATCH in JOIN ... ON",
}


def resolver(relation: Relation, source: QueryText) -> Callable[[exp.Column], exp.Expr]:
    """Resolve references against ``relation`` to unqualified plan columns."""
    return lambda column: plan_column(relation.resolve(column, source).plan_name)


def plan_sql(expression: exp.Expr, relation: Relation, source: QueryText, replace: Replacement | None = None) -> str:
    """``expression`` as plan SQL over ``relation``'s node, e.g. ``upper(r.name)`` -> ``UPPER(name)``."""
    return to_sql(rewrite(expression, resolver(relation, source), source, replace))
