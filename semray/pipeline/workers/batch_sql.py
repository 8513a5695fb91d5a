"""Evaluate SQL over one Arrow batch with DuckDB (runs inside Ray workers)."""

from __future__ import annotations

import threading

import duckdb
import pyarrow as pa

from semray.operators.safe_sql import isolated_connection
from semray.operators.schema import quote

_local = threading.local()


def _connection() -> duckdb.DuckDBPyConnection:
    connection = getattr(_local, "connection", None)
    if connection is None:
        # One thread per batch: Ray already runs one task per CPU. Isolated: the SQL it runs
        # comes from plans, which may not read files (operators/safe_sql.py).
        connection = isolated_connection(threads=1)
        _local.connection = connection
    return connection


def run_sql(batch: pa.Table, sql: str, **tables: pa.Table) -> pa.Table:
    """Run ``sql`` where the table ``batch`` is the given Arrow table (and ``tables`` by name).

    >>> run_sql(pa.table({"x": [1, 2]}), "SELECT x * 2 AS y FROM batch").column("y").to_pylist()
    [2, 4]
    """
    cursor = _connection().cursor()
    try:
        cursor.register("batch", batch)
        for name, table in tables.items():
            cursor.register(name, table)
        return cursor.sql(sql).to_arrow_table()
    finally:
        cursor.close()


def empty_table(columns: tuple[tuple[str, str], ...]) -> pa.Table:
    """A zero-row Arrow table with DuckDB-typed columns."""
    select = ", ".join(f"NULL::{kind} AS {quote(name)}" for name, kind in columns) or "NULL AS _unused"
    return _connection().sql(f"SELECT {select} LIMIT 0").to_arrow_table()
