"""The SQL ``where`` of a segment search: built from datasets and levels, or a user's text checked and re-written.

A filter is pushed into LanceDB as text, so nothing a user typed reaches it verbatim:

- ``datasets`` and ``levels`` become ``"dataset" IN ('a', 'b''s')`` with every quote doubled
  (LanceDB's SQL takes a backslash literally, so doubling is the whole escape); levels must be
  ``SEGMENT_LEVELS``.
- a raw ``where`` must pass ``check_safe_expression`` (one scalar DuckDB expression: no
  subquery, no session function), then a narrow grammar: comparisons, ``IN`` lists, ``BETWEEN``,
  ``LIKE``, ``IS [NOT] NULL``, ``AND`` / ``OR`` / ``NOT``, ``lower`` / ``upper``, over literals and
  the segments' scalar columns. It is parsed (sqlglot, DuckDB dialect) and *re-generated* from
  its tree, identifiers quoted and comments dropped, so its text cannot close a parenthesis,
  comment out the rest or lex differently in LanceDB than it was checked.

The parts are joined as ``(a) AND (b) AND (c)``, so a user's ``1=1) OR (1=1`` (which parses on
its own) cannot widen the dataset restriction.

>>> segment_filter(datasets=["notes"], levels=["chunk"], where="ordinal < 3")
'("dataset" IN (\\'notes\\')) AND ("level" IN (\\'chunk\\')) AND ("ordinal" < 3)'
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlglot
from sqlglot import exp

from semray import sql_quoting
from semray.catalog.tables import SEGMENT_LEVELS
from semray.errors import ExpressionLimitError, SearchError, UnsafeExpressionError, suggest
from semray.operators.safe_sql import check_safe_expression

FILTERABLE_COLUMNS = frozenset(
    {"segment_id", "dataset", "document_id", "parent_id", "level", "ordinal", "text", "start", "end", "topic"}
)
"""Scalar columns of ``segments`` a ``where`` may name (not the vector, not the list ``path``)."""

_ALLOWED_NODES: tuple[type[exp.Expression], ...] = (
    exp.And,
    exp.Or,
    exp.Not,
    exp.Paren,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.In,
    exp.Between,
    exp.Like,
    exp.ILike,
    exp.Is,
    exp.Null,
    exp.Boolean,
    exp.Literal,
    exp.Neg,
    exp.Column,
    exp.Identifier,
    exp.Lower,
    exp.Upper,
)


def segment_filter(
    *, datasets: Sequence[str] | None = None, levels: Sequence[str] | None = None, where: str | None = None
) -> str | None:
    """The LanceDB filter for these restrictions, or None when there is none (see the module doc)."""
    parts: list[str] = []
    if datasets is not None:
        parts.append(in_list("dataset", _strings(datasets, "datasets")))
    if levels is not None:
        for level in _strings(levels, "levels"):
            if level not in SEGMENT_LEVELS:
                hint = suggest(level, SEGMENT_LEVELS)
                advice = f"did you mean {hint!r}?" if hint else f"levels are {', '.join(SEGMENT_LEVELS)}"
                raise SearchError(f"unknown segment level {level!r}; {advice}")
        parts.append(in_list("level", list(levels)))
    if where is not None and where.strip():
        parts.append(checked_where(where))
    if not parts:
        return None
    return " AND ".join(f"({part})" for part in parts)


def in_list(column: str, values: Sequence[str]) -> str:
    """``"column" IN ('v1', 'v2')`` with every value quoted; ``values`` must not be empty.

    >>> in_list("dataset", ["it's"])
    '"dataset" IN (\\'it\\'\\'s\\')'
    """
    if not values:
        raise SearchError(f"an IN filter on {column!r} needs at least one value")
    return f'"{column}" IN ({", ".join(quote_literal(value) for value in values)})'


def quote_literal(value: str) -> str:
    """A SQL string literal of ``value`` for LanceDB: single quotes, inner quotes doubled.

    >>> quote_literal("a'b\\\\")
    "'a''b\\\\'"
    """
    if "\x00" in value:
        raise SearchError("a filter value may not contain a NUL character")
    return sql_quoting.quote_literal(value)


def checked_where(where: str) -> str:
    """``where`` re-generated from its parse tree, if it is a safe filter on segment columns; else ``SearchError``.

    >>> checked_where("level = 'chunk' /* a note */")
    '"level" = \\'chunk\\''
    """
    try:
        check_safe_expression(where, "segment search where")
    except (UnsafeExpressionError, ExpressionLimitError) as error:
        raise SearchError(str(error)) from error
    try:
        tree = sqlglot.parse_one(where, dialect="duckdb")
    except sqlglot.errors.ParseError as error:
        raise SearchError(f"segment search where {where!r} does not parse: {str(error).splitlines()[0]}") from error
    for node in tree.walk():
        if not isinstance(node, _ALLOWED_NODES):
            raise SearchError(
                f"segment search where {where!r} uses {type(node).__name__}; a filter is comparisons, IN lists, "
                "BETWEEN, LIKE, IS NULL, AND/OR/NOT and lower/upper over literals and segment columns"
            )
        if isinstance(node, exp.Column):
            _check_column(node, where)
    return tree.sql(dialect="duckdb", identify=True, comments=False)


def _check_column(node: exp.Column, where: str) -> None:
    if node.table or node.name not in FILTERABLE_COLUMNS:
        name = node.sql(dialect="duckdb")
        hint = suggest(node.name, FILTERABLE_COLUMNS)
        advice = f"did you mean {hint!r}?" if hint else f"columns: {', '.join(sorted(FILTERABLE_COLUMNS))}"
        raise SearchError(f"segment search where {where!r} names {name}, not a segment column; {advice}")


def _strings(values: Sequence[str], what: str) -> list[str]:
    if isinstance(values, str):
        raise SearchError(f"{what} is a list of names, not one string: pass [{values!r}]")
    listed = list(values)
    for value in listed:
        if not isinstance(value, str):
            raise SearchError(f"{what} holds {value!r}, not a name")
    return listed
