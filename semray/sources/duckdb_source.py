"""DuckDB database files, opened read-only; rows arrive as Arrow batches.

A base ``table`` reads in rowid (scan) order and uses the rowid as row id, split into
a few rowid-range tasks; a view or ``query`` is one task numbered in result order
(DuckDB preserves insertion order by default, so the numbering is stable).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from semray.errors import SourceError
from semray.sources.base import (
    Options,
    ReadTask,
    check_batch_rows,
    check_column_names,
    check_options,
    option_int,
    select_columns,
)
from semray.sources.rowids import numbered_ids, rebatch, with_rowids
from semray.sources.sql_target import SqlTarget, database_file, missing_table, split_ranges
from semray.sql_quoting import quote_identifier

OPTIONS = frozenset({"table", "query", "task_rows"})


def connect(path: Path) -> duckdb.DuckDBPyConnection:
    """The database, read-only; a source's ``query`` comes from the plan and may not reach any
    other file (``read_text``, ``ATTACH``, extensions): external access is off."""
    try:
        return duckdb.connect(str(path), read_only=True, config={"enable_external_access": False})
    except duckdb.Error as error:
        raise SourceError(f"cannot open duckdb database {str(path)!r}: {error}") from error


@dataclass(frozen=True, slots=True)
class DuckdbRead:
    """Run ``sql``; with ``rowid_first`` its first column is the row id, else rows are numbered from 0."""

    path: str
    sql: str
    rowid_first: bool
    batch_rows: int
    placeholder: bool = False
    """The last selected column only stands in for "no columns" (SQL cannot select none); drop it."""

    def __call__(self) -> Iterator[pa.Table]:
        connection = connect(Path(self.path))
        try:
            reader = connection.sql(self.sql).to_arrow_reader(self.batch_rows)
            row = 0
            for table in rebatch(reader, self.batch_rows):
                values = table.drop_columns([table.column_names[-1]]) if self.placeholder else table
                if self.rowid_first:
                    yield with_rowids(values.drop_columns([values.column_names[0]]), values.column(0))
                else:
                    yield with_rowids(values, numbered_ids(row, table.num_rows))
                row += table.num_rows
        except duckdb.Error as error:
            raise SourceError(f"cannot read duckdb {self.path!r}: {error}") from error
        finally:
            connection.close()


@dataclass(frozen=True)
class DuckdbSource:
    """A duckdb source, e.g. ``DuckdbSource.open("shop.duckdb", {"table": "orders"})``."""

    path: Path
    target: SqlTarget
    relation: str
    """The table (quoted, maybe schema-qualified) or the parenthesized query."""
    arrow_schema: pa.Schema
    has_rowid: bool
    row_count: int | None
    rowid_range: tuple[int, int] | None
    task_rows: int
    kind: str = "duckdb"

    @classmethod
    def open(cls, path: str | None, options: Options) -> DuckdbSource:
        check_options("duckdb", options, OPTIONS)
        file = database_file(path, "duckdb")
        target = SqlTarget.from_options("duckdb", options)
        connection = connect(file)
        try:
            return cls._inspect(file, target, connection, option_int(options, "task_rows", 1 << 20))
        except duckdb.Error as error:
            raise SourceError(f"cannot read {target.describe(file)}: {error}") from error
        finally:
            connection.close()

    @classmethod
    def _inspect(
        cls, file: Path, target: SqlTarget, connection: duckdb.DuckDBPyConnection, task_rows: int
    ) -> DuckdbSource:
        where = target.describe(file)
        has_rowid = False
        count = None
        bounds = None
        if target.table is not None:
            relation, has_rowid = _find_table(connection, target.table, file)
        else:
            relation = f"({target.query})"
        schema = connection.sql(f"SELECT * FROM {relation} LIMIT 0").to_arrow_table().schema
        check_column_names(schema, where)
        if has_rowid:
            count, low, high = connection.execute(f"SELECT count(*), min(rowid), max(rowid) FROM {relation}").fetchone()  # type: ignore[misc]
            bounds = None if low is None else (int(low), int(high))
            empty = count == 0
        else:
            empty = connection.execute(f"SELECT 1 FROM {relation} LIMIT 1").fetchone() is None
        if empty:
            raise SourceError(f"{where} is empty (0 rows); give a table or query with at least one row")
        return cls(
            path=file,
            target=target,
            relation=relation,
            arrow_schema=schema,
            has_rowid=has_rowid,
            row_count=count,
            rowid_range=bounds,
            task_rows=task_rows,
        )

    def schema(self) -> pa.Schema:
        return self.arrow_schema

    def estimated_rows(self) -> int | None:
        return self.row_count

    def read_tasks(self, columns: Sequence[str] | None, batch_rows: int) -> list[ReadTask]:
        check_batch_rows(batch_rows)
        names = select_columns(self.arrow_schema, columns, self.target.describe(self.path))
        selected = ", ".join(quote_identifier(name) for name in names)
        if not self.has_rowid or self.rowid_range is None:
            sql = f"SELECT {selected or 'NULL'} FROM {self.relation}"
            read = DuckdbRead(str(self.path), sql, rowid_first=False, batch_rows=batch_rows, placeholder=not names)
            return [ReadTask(read=read, estimated_rows=self.row_count, input_files=(str(self.path),))]
        low, high = self.rowid_range
        parts = -(-(self.row_count or 0) // self.task_rows)
        tasks = []
        for start, stop in split_ranges(low, high, parts):
            columns_sql = f"rowid, {selected}" if selected else "rowid"
            sql = f"SELECT {columns_sql} FROM {self.relation} WHERE rowid BETWEEN {start} AND {stop} ORDER BY rowid"
            estimate = (self.row_count or 0) * (stop - start + 1) // (high - low + 1)
            read = DuckdbRead(str(self.path), sql, rowid_first=True, batch_rows=batch_rows)
            tasks.append(ReadTask(read=read, estimated_rows=estimate, input_files=(str(self.path),)))
        return tasks

    def invalid_utf8_count(self) -> int:
        return 0  # DuckDB only stores valid UTF-8 text.


def _find_table(connection: duckdb.DuckDBPyConnection, table: str, file: Path) -> tuple[str, bool]:
    """The quoted relation for ``table`` (``name`` or ``schema.name``) and whether it has a rowid."""
    rows = connection.sql(
        "SELECT table_schema, table_name, table_type FROM information_schema.tables "
        "WHERE table_catalog = current_database()"
    ).fetchall()
    found = {}
    for schema, name, kind in rows:
        is_table = kind == "BASE TABLE"
        found[f"{schema}.{name}"] = (f"{quote_identifier(schema)}.{quote_identifier(name)}", is_table)
        if schema == "main":
            found[name] = found[f"{schema}.{name}"]
    if table not in found:
        raise missing_table(table, file, sorted(name for name in found if not name.startswith("main.")))
    return found[table]
