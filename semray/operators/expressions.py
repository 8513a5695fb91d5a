"""SQL expressions inside plans: parsed with sqlglot, typed by DuckDB's binder.

Relational predicates, projections and aggregates are SQL text in the plan. Here they
are parsed (sqlglot, DuckDB dialect), their column references checked against the input
schema with a suggestion for typos, and their result types derived by binding them
against an empty table of that schema in DuckDB, the engine that later evaluates them.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from semray.errors import ColumnNotFoundError, ExpressionError
from semray.operators.expression_limits import check_expression_size
from semray.operators.safe_sql import Context, check_safe_expression, isolated_connection
from semray.operators.schema import Schema, quote

DIALECT = "duckdb"


def parse_expression(sql: str, where: str, context: Context = "scalar") -> exp.Expr:
    """Parse one SQL expression, e.g. ``parse_expression("rating >= 4", "Filter")``.

    Every plan expression comes through here, from every surface, so this is where one is
    checked to be small enough to parse (``expression_limits``, before any parser runs) and safe
    to run (``safe_sql``): no subqueries, table functions or settings.
    """
    if not sql or not sql.strip():
        raise ExpressionError(f"{where}: empty expression")
    check_expression_size(sql, where)
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT, into=exp.Condition)
    except RecursionError:
        raise ExpressionError(
            f"{where}: {sql[:80]!r}... is nested too deeply to parse; simplify it or split it into several steps"
        ) from None
    except ParseError as error:
        detail = error.errors[0] if error.errors else {}
        column = detail.get("col")
        position = f" at column {column}" if column else ""
        description = detail.get("description", str(error))
        raise ExpressionError(f"{where}: cannot parse {sql!r}{position}: {description}") from None
    if isinstance(tree, exp.Select | exp.Query):
        raise ExpressionError(f"{where}: expected an expression, got a query: {sql!r}")
    check_safe_expression(sql, where, context)
    return tree


def referenced_columns(tree: exp.Expr) -> tuple[str, ...]:
    """Column names an expression reads, in first-use order (qualifiers dropped)."""
    names: dict[str, None] = {}
    for column in tree.find_all(exp.Column):
        names.setdefault(column.name, None)
    return tuple(names)


def check_columns(sql: str, schema: Schema, where: str) -> tuple[str, ...]:
    """Parse ``sql`` and check that every column it reads exists in ``schema``."""
    tree = parse_expression(sql, where)
    names = referenced_columns(tree)
    for name in names:
        if name not in schema:
            raise ColumnNotFoundError(name, schema.names, where)
    return names


def expression_type(sql: str, schema: Schema, where: str) -> str:
    """DuckDB type of ``sql`` evaluated over rows of ``schema``.

    >>> expression_type("rating * 2", Schema.of(("rating", "BIGINT")), "Project")
    'BIGINT'
    """
    check_columns(sql, schema, where)
    return _bind(sql, _schema_key(schema), where, aggregate=False)


def aggregate_type(sql: str, keys: tuple[str, ...], schema: Schema, where: str) -> str:
    """DuckDB type of an aggregate expression grouped by ``keys``."""
    tree = parse_expression(sql, where, "aggregate")
    if not any(isinstance(node, exp.AggFunc) for node in tree.walk()):
        raise ExpressionError(f"{where}: {sql!r} is not an aggregate (use count, sum, avg, min, max, ...)")
    for name in referenced_columns(tree):
        if name not in schema:
            raise ColumnNotFoundError(name, schema.names, where)
    return _bind(sql, _schema_key(schema), where, aggregate=True, keys=keys)


def _schema_key(schema: Schema) -> tuple[tuple[str, str], ...]:
    return tuple((column.name, column.type) for column in schema.columns)


@functools.lru_cache(maxsize=4096)
def _bind(
    sql: str,
    schema_key: tuple[tuple[str, str], ...],
    where: str,
    *,
    aggregate: bool,
    keys: tuple[str, ...] = (),
) -> str:
    group = f" GROUP BY {', '.join(quote(key) for key in keys)}" if aggregate and keys else ""
    query = f"SELECT ({sql}) AS value FROM input{group}"
    with _scratch({"input": schema_key}, where, sql) as cursor:
        cursor.execute(query).fetchall()
        described = cursor.execute(f"DESCRIBE {query}").fetchall()
    return str(described[0][1])


_local = threading.local()


@contextlib.contextmanager
def _scratch(
    tables: dict[str, tuple[tuple[str, str], ...]], where: str, sql: str
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor with one-row, all-NULL temp tables of the given schemas; binding errors
    become ExpressionError. One in-memory database per thread: opening one costs ~180 ms,
    a cursor ~1 ms."""
    database = getattr(_local, "database", None)
    if database is None:
        database = _local.database = isolated_connection()
    cursor = database.cursor()
    try:
        for name, schema_key in tables.items():
            columns = ", ".join(f"{quote(column)} {kind}" for column, kind in schema_key) or "_empty INTEGER"
            cursor.execute(f"CREATE TEMP TABLE {name} ({columns})")
            # One all-NULL row makes DuckDB fold constants, so "rating > 'abc'" fails here
            # rather than halfway through a run.
            cursor.execute(f"INSERT INTO {name} DEFAULT VALUES")
        yield cursor
    except duckdb.Error as error:
        message = str(error).split("\n")[0]
        raise ExpressionError(f"{where}: {sql!r} does not type-check: {message}") from None
    finally:
        cursor.close()


def check_join_condition(sql: str, left: Schema, right: Schema, where: str) -> None:
    """Check a join condition over ``l.column`` and ``r.column`` references."""
    tree = parse_expression(sql, where)
    for column in tree.find_all(exp.Column):
        side = column.table
        if side == "l":
            left.require([column.name], f"{where} (left input)")
        elif side == "r":
            right.require([column.name], f"{where} (right input)")
        elif side:
            raise ExpressionError(f"{where}: qualify join columns as l.<column> or r.<column>, got {column.sql()!r}")
        elif column.name not in left and column.name not in right:
            raise ColumnNotFoundError(column.name, left.names + right.names, where)
    sides = {"l": _schema_key(left), "r": _schema_key(right)}
    with _scratch(sides, where, sql) as cursor:
        kind = cursor.execute(f"DESCRIBE SELECT ({sql}) AS value FROM l, r").fetchall()[0][1]
        cursor.execute(f"SELECT ({sql}) FROM l, r").fetchall()
    if kind != "BOOLEAN":
        raise ExpressionError(f"{where}: join condition {sql!r} is {kind}, not BOOLEAN")


def equi_join_keys(sql: str) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """Split a join condition into ``l.a = r.b`` key pairs and a residual predicate.

    >>> equi_join_keys("l.id = r.pid AND l.x > r.y")
    ((('id', 'pid'),), 'l.x > r.y')
    """
    tree = parse_expression(sql, "Join")
    conjuncts = list(tree.flatten()) if isinstance(tree, exp.And) else [tree]
    keys: list[tuple[str, str]] = []
    residual: list[exp.Expr] = []
    for conjunct in conjuncts:
        pair = _key_pair(conjunct)
        if pair is None:
            residual.append(conjunct)
        else:
            keys.append(pair)
    rest = exp.and_(*residual).sql(dialect=DIALECT) if residual else None
    return tuple(keys), rest


def _key_pair(conjunct: exp.Expr) -> tuple[str, str] | None:
    if not isinstance(conjunct, exp.EQ):
        return None
    a, b = conjunct.this, conjunct.expression
    if not (isinstance(a, exp.Column) and isinstance(b, exp.Column)):
        return None
    if a.table == "l" and b.table == "r":
        return a.name, b.name
    if a.table == "r" and b.table == "l":
        return b.name, a.name
    return None
