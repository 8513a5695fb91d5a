"""Plan expressions run only as scalar SQL over the rows in hand, in a DuckDB that reaches no file.

Every SQL expression in a plan (a filter's predicate, a projection, an aggregate, a join
condition), whatever surface wrote it (JSON plan, SQL, Python), is spliced into DuckDB
statements over one Arrow batch. A plan file is data a user may not have written, so its
expressions must not read files, reach the network or change settings. Two layers:

1. ``check_safe_expression``: the text, once within the size limits of ``expression_limits``,
   is parsed by DuckDB itself (``json_serialize_sql``), so what is checked is exactly what
   will run, and must be one scalar expression: no subquery
   (which could scan ``read_text('/etc/passwd')``), no window function, no parameter, no
   ``*``/``COLUMNS``, no ``unnest`` (it multiplies rows), no settings or variables, and no
   aggregate outside an Aggregate. Spliced into ``SELECT (<text>)`` it must stay that one
   expression (no closing parenthesis that opens a FROM clause, no second statement).
2. ``isolated_connection``: every in-memory DuckDB the engine evaluates expressions with has
   ``enable_external_access`` off and its configuration locked, so even an expression that got
   past the first layer cannot open a file, attach a database or load an extension.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any, Literal

import duckdb

from semray.errors import UnsafeExpressionError
from semray.operators.expression_limits import check_expression_size

Context = Literal["scalar", "aggregate"]

# Functions that read the session rather than the row: settings, variables, the query text.
_SESSION_FUNCTIONS = frozenset({"current_setting", "current_query", "getvariable", "getenv"})
# Functions that change the number of rows: one input row must give one output row.
_ROW_MULTIPLYING = frozenset({"unnest", "generate_subscripts"})

_FORBIDDEN_CLASSES = {
    "SUBQUERY": "a subquery",
    "WINDOW": "a window function",
    "PARAMETER": "a parameter",
    "STAR": "'*' or COLUMNS(...)",
}

_CLAUSES = ("where_clause", "group_expressions", "group_sets", "having", "qualify", "sample", "modifiers")

_ADVICE = (
    "plan expressions are scalar SQL over the input's columns; read other data with a Scan and "
    "combine it with a Join (in SQL: a JOIN, or 'col IN (SELECT ...)' in WHERE)"
)


def isolated_connection(*, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that cannot touch the file system or the network.

    >>> isolated_connection().execute("SELECT 1 + 1").fetchall()
    [(2,)]
    """
    connection = duckdb.connect(config={"enable_external_access": False})
    if threads is not None:
        connection.execute(f"SET threads TO {int(threads)}")
    connection.execute("SET lock_configuration = true")
    return connection


def check_safe_expression(sql: str, where: str, context: Context = "scalar") -> None:
    """Raise ``UnsafeExpressionError`` unless ``sql`` is one scalar expression (see the module doc),
    ``ExpressionLimitError`` when it passes a size limit of ``expression_limits``.

    >>> check_safe_expression("rating >= 4 AND lower(review) LIKE '%late%'", "Filter")
    >>> check_safe_expression("(SELECT count(*) FROM read_text('/etc/hostname')) > 0", "Filter")
    Traceback (most recent call last):
    ...
    semray.errors.UnsafeExpressionError: Filter: ... uses a subquery, which a plan expression may not; ...
    """
    check_expression_size(sql, where)
    problem = _problem(sql, context)
    if problem is not None:
        raise UnsafeExpressionError(f"{where}: {sql!r} {problem}")


@functools.lru_cache(maxsize=4096)
def _problem(sql: str, context: Context) -> str | None:
    """What makes ``sql`` unsafe in ``context``, or None; cached, since plans re-check their
    expressions whenever a node is rebuilt."""
    tree = _duckdb_parse(sql)
    if isinstance(tree, str):
        return tree
    for node in _expression_nodes(tree):
        kind = node.get("class")
        if kind in _FORBIDDEN_CLASSES:
            return f"uses {_FORBIDDEN_CLASSES[kind]}, which a plan expression may not; {_ADVICE}"
        if kind in ("FUNCTION", "AGGREGATE"):
            name = str(node.get("function_name", "")).lower()
            if name in _SESSION_FUNCTIONS or name.startswith("__internal"):
                return f"calls {name}(), which reads the session, not the row; a plan expression may not"
            if name in _ROW_MULTIPLYING:
                return f"calls {name}(), which changes the number of rows; a plan expression keeps one value per row"
            if context == "scalar" and name in _aggregate_only_functions():
                return f"calls the aggregate {name}() outside an Aggregate; group the rows first (GROUP BY, .aggregate)"
    return None


def _duckdb_parse(sql: str) -> dict[str, Any] | str:
    """DuckDB's parse of ``SELECT (<sql>)``: the one select item, or what is wrong with it."""
    statement = f"SELECT ({sql}) AS value"
    cursor = _parser().cursor()
    try:
        (serialized,) = cursor.execute("SELECT json_serialize_sql(?)", [statement]).fetchone() or ("",)
    except duckdb.Error as error:
        return f"cannot be checked: {str(error).splitlines()[0]}"
    finally:
        cursor.close()
    try:
        document = json.loads(serialized)
    except RecursionError:
        return "is nested too deeply to check; simplify it or split it into several steps"
    if document.get("error"):
        message = str(document.get("error_message", "syntax error"))
        if "depth" in message:
            return "is nested too deeply (DuckDB allows 1,000 levels); simplify it or split it into several steps"
        return f"is not one SQL expression: {message}"
    statements = document.get("statements", [])
    if len(statements) != 1:
        return "is not one SQL expression (it ends one statement and starts another)"
    select = statements[0].get("node", {})
    clauses = (
        select.get("type") != "SELECT_NODE"
        or len(select.get("select_list", [])) != 1
        or (select.get("from_table") or {}).get("type") != "EMPTY"
        or any(select.get(key) for key in _CLAUSES)
        or (select.get("cte_map") or {}).get("map")
    )
    if clauses:
        return "is not one SQL expression (its parentheses do not balance into a single value)"
    item: dict[str, Any] = select["select_list"][0]
    return item


def _expression_nodes(tree: Any) -> Iterator[dict[str, Any]]:
    """Every expression node of DuckDB's serialized parse tree, iteratively (trees can be deep)."""
    stack = [tree]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if "class" in value:
                yield value
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


@functools.cache
def _parser() -> duckdb.DuckDBPyConnection:
    return isolated_connection(threads=1)


@functools.cache
def _aggregate_only_functions() -> frozenset[str]:
    """Names DuckDB knows only as aggregates (``sum``, ``count``, ...; not ``first`` of a list)."""
    rows = (
        _parser()
        .execute(
            "SELECT function_name, bool_and(function_type = 'aggregate') FROM duckdb_functions() GROUP BY function_name"
        )
        .fetchall()
    )
    return frozenset(name.lower() for name, only in rows if only)
