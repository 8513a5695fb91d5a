"""SQLite database files, read-only, through the standard library.

A ``table`` reads in rowid order and uses the rowid as row id (split into a few
rowid-range tasks); a ``query`` is one task numbered in result order. SQLite is
dynamically typed, so column types come from declared types and, where those are
vague, from a sample of values. Bad UTF-8 in text becomes U+FFFD and is counted.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pyarrow as pa

from semray.errors import SourceError
from semray.sources.base import (
    Options,
    ReadTask,
    check_batch_rows,
    check_column_names,
    check_options,
    option_int,
    project_schema,
    select_columns,
)
from semray.sources.rowids import numbered_ids, with_rowids
from semray.sources.sql_target import SqlTarget, database_file, missing_table, split_ranges
from semray.sources.sqlite_values import SqliteText, column_type, to_arrow
from semray.sources.utf8 import report_invalid_utf8
from semray.sql_quoting import quote_identifier

OPTIONS = frozenset({"table", "query", "task_rows", "infer_rows"})


def connect(path: Path) -> sqlite3.Connection:
    """A read-only connection whose text values decode leniently (bad bytes -> U+FFFD).

    A source's ``query`` comes from the plan, which may not reach other files: the
    authorizer allows reading this database only (``ATTACH`` would open or even create any
    file, ``VACUUM INTO`` write one).
    """
    try:
        connection = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise SourceError(f"cannot open sqlite database {str(path)!r}: {error}") from error
    connection.text_factory = SqliteText.decode
    connection.set_authorizer(_read_only)
    return connection


_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_READ_PRAGMAS = frozenset({"table_info", "table_xinfo"})


def _read_only(action: int, first: str | None, _second: str | None, _database: str | None, _trigger: str | None) -> int:
    """sqlite3 authorizer: reads of the opened database, nothing else."""
    if action in _READ_ACTIONS or (action == sqlite3.SQLITE_PRAGMA and (first or "").lower() in _READ_PRAGMAS):
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


@dataclass(frozen=True, slots=True)
class SqliteRead:
    """Run ``sql`` and yield ``_rowid`` + ``schema`` columns; with ``rowid_first`` the first value is the id."""

    path: str
    sql: str
    schema: pa.Schema
    rowid_first: bool
    batch_rows: int
    report: bool = True

    def __call__(self) -> Iterator[pa.Table]:
        bad = 0
        try:
            for table, hit in self.decoded():
                bad += hit
                yield table
        finally:
            if self.report:
                report_invalid_utf8(self.path, bad)

    def decoded(self) -> Iterator[tuple[pa.Table, int]]:
        connection = connect(Path(self.path))
        try:
            cursor = connection.execute(self.sql)
            row = 0
            while rows := cursor.fetchmany(self.batch_rows):
                yield self._table(rows, row), sum(any(type(v) is SqliteText for v in r) for r in rows)
                row += len(rows)
        except sqlite3.Error as error:
            raise SourceError(f"cannot read sqlite {self.path!r}: {error}") from error
        finally:
            connection.close()

    def _table(self, rows: list[tuple[object, ...]], row: int) -> pa.Table:
        offset = 1 if self.rowid_first else 0
        arrays = [
            to_arrow([r[offset + i] for r in rows], field.type, f"column {field.name!r} of {self.path!r}")
            for i, field in enumerate(self.schema)
        ]
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        ids = pa.array([r[0] for r in rows], pa.int64()) if self.rowid_first else numbered_ids(row, len(rows))
        return with_rowids(table, ids)


@dataclass(frozen=True)
class SqliteSource:
    """A sqlite source, e.g. ``SqliteSource.open("shop.db", {"table": "orders"})``."""

    path: Path
    target: SqlTarget
    arrow_schema: pa.Schema
    rowid_column: str | None
    """How to select the table's rowid (None for queries, views and WITHOUT ROWID tables)."""
    row_count: int | None
    rowid_range: tuple[int, int] | None
    task_rows: int
    kind: str = "sqlite"

    @classmethod
    def open(cls, path: str | None, options: Options) -> SqliteSource:
        check_options("sqlite", options, OPTIONS)
        file = database_file(path, "sqlite")
        target = SqlTarget.from_options("sqlite", options)
        connection = connect(file)
        try:
            return cls._inspect(file, target, connection, options)
        except sqlite3.DatabaseError as error:
            raise SourceError(f"cannot read sqlite database {str(file)!r}: {error}") from error
        finally:
            connection.close()

    @classmethod
    def _inspect(cls, file: Path, target: SqlTarget, connection: sqlite3.Connection, options: Options) -> SqliteSource:
        infer_rows = option_int(options, "infer_rows", 1000)
        where = target.describe(file)
        rowid = None
        count = None
        bounds = None
        if target.table is not None:
            tables = {
                name: kind
                for name, kind in connection.execute("SELECT name, type FROM sqlite_master")
                if kind in ("table", "view")
            }
            if target.table not in tables:
                raise missing_table(target.table, file, sorted(tables))
            declared = {
                row[1]: str(row[2])
                for row in connection.execute(f"PRAGMA table_info({quote_identifier(target.table)})")
            }
            rowid = _rowid_alias(connection, target.table, list(declared)) if tables[target.table] == "table" else None
            source_sql = f"SELECT * FROM {quote_identifier(target.table)}"
            count = int(connection.execute(f"SELECT count(*) FROM {quote_identifier(target.table)}").fetchone()[0])
            if rowid is not None and count:
                low, high = connection.execute(
                    f"SELECT min({rowid}), max({rowid}) FROM {quote_identifier(target.table)}"
                ).fetchone()
                bounds = (int(low), int(high))
        else:
            declared = {}
            source_sql = f"SELECT * FROM ({target.query})"
        cursor = connection.execute(f"{source_sql} LIMIT {infer_rows}")
        names = [column[0] for column in cursor.description]
        sample = cursor.fetchall()
        if not sample:
            raise SourceError(f"{where} is empty (0 rows); give a table or query with at least one row")
        fields = [
            pa.field(name, column_type(declared.get(name, ""), [row[i] for row in sample]))
            for i, name in enumerate(names)
        ]
        schema = pa.schema(fields)
        check_column_names(schema, where)
        return cls(
            path=file,
            target=target,
            arrow_schema=schema,
            rowid_column=rowid,
            row_count=count,
            rowid_range=bounds,
            task_rows=option_int(options, "task_rows", 1 << 18),
        )

    def schema(self) -> pa.Schema:
        return self.arrow_schema

    def estimated_rows(self) -> int | None:
        return self.row_count

    def read_tasks(self, columns: Sequence[str] | None, batch_rows: int) -> list[ReadTask]:
        check_batch_rows(batch_rows)
        names = select_columns(self.arrow_schema, columns, self.target.describe(self.path))
        return [
            ReadTask(read=read, estimated_rows=rows, input_files=(str(self.path),))
            for read, rows in self._reads(names, batch_rows, report=True)
        ]

    def invalid_utf8_count(self) -> int:
        return self._invalid_utf8

    @cached_property
    def _invalid_utf8(self) -> int:
        text = [f.name for f in self.arrow_schema if pa.types.is_string(f.type)]
        if not text:
            return 0
        return sum(hit for read, _ in self._reads(text, 1 << 14, report=False) for _, hit in read.decoded())

    def _reads(self, names: list[str], batch_rows: int, report: bool) -> list[tuple[SqliteRead, int | None]]:
        schema = project_schema(self.arrow_schema, names)
        selected = ", ".join(quote_identifier(name) for name in names)
        if self.target.query is not None or self.rowid_column is None:
            source = (
                f"({self.target.query})" if self.target.query is not None else quote_identifier(str(self.target.table))
            )
            sql = f"SELECT {selected or 'NULL'} FROM {source}"
            read = SqliteRead(str(self.path), sql, schema, rowid_first=False, batch_rows=batch_rows, report=report)
            return [(read, self.row_count)]
        table = quote_identifier(str(self.target.table))
        rowid = self.rowid_column
        low, high = self.rowid_range or (0, -1)
        parts = -(-(self.row_count or 0) // self.task_rows)
        columns = f"{rowid}, {selected}" if selected else rowid
        reads: list[tuple[SqliteRead, int | None]] = []
        for start, stop in split_ranges(low, high, parts) if high >= low else []:
            sql = f"SELECT {columns} FROM {table} WHERE {rowid} BETWEEN {start} AND {stop} ORDER BY {rowid}"
            estimate = (self.row_count or 0) * (stop - start + 1) // (high - low + 1)
            reads.append(
                (
                    SqliteRead(str(self.path), sql, schema, rowid_first=True, batch_rows=batch_rows, report=report),
                    estimate,
                )
            )
        return reads


def _rowid_alias(connection: sqlite3.Connection, table: str, columns: list[str]) -> str | None:
    """A name that selects the real rowid (a column may shadow ``rowid``), or None for WITHOUT ROWID tables."""
    for alias in ("rowid", "_rowid_", "oid"):
        if alias in {column.lower() for column in columns}:
            continue
        try:
            connection.execute(f"SELECT {alias} FROM {quote_identifier(table)} LIMIT 0")
        except sqlite3.OperationalError:
            return None
        return alias
    return None
