"""Postgres tables, read through psycopg (the optional ``postgres`` extra) in a read-only transaction.

``path`` is a connection URI (``postgresql://ann@db.example:5432/shop``); the options ``table`` and
``schema`` (default ``public``) name the table as Postgres spells it, so ``Order Items`` needs no
quotes. Column types come from the table's declared types: integers, floats, booleans, text, dates,
times and timestamps keep theirs, ``numeric`` reads as a double, anything else (uuid, json, arrays,
intervals...) as its text, cast on the server. A table reads in primary-key order (physical order
without one; a view in its result order) and its rows are numbered: the row ids are stable while
the table is unchanged. Every connection gives up after ``CONNECT_TIMEOUT_S`` unless the URI sets
its own ``connect_timeout``.

A password is never shown: errors name the URI without it (``redact_uri``) and have it scrubbed
from the driver's text (``scrub``). The catalog stores only the redacted URI, so a later scan finds
the password where libpq looks for one: ``PGPASSWORD``, ``PGPASSFILE`` or ``~/.pgpass``.

>>> redact_uri("postgresql://ann:s3cret@127.0.0.1:5432/shop?sslmode=require&password=s3cret")
'postgresql://ann@127.0.0.1:5432/shop?sslmode=require'
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from semray.errors import SourceError, suggest
from semray.sources.base import (
    Options,
    ReadTask,
    check_batch_rows,
    check_column_names,
    check_options,
    option_str,
    project_schema,
    select_columns,
)
from semray.sources.rowids import numbered_ids, with_rowids
from semray.sql_quoting import quote_identifier

OPTIONS = frozenset({"table", "schema"})
SCHEMES = ("postgres://", "postgresql://")
CONNECT_TIMEOUT_S = 10
"""Seconds a connection attempt may take (libpq's ``connect_timeout``): a silent host fails, never hangs."""

ARROW_TYPES: dict[str, pa.DataType] = {
    "smallint": pa.int16(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "real": pa.float32(),
    "double precision": pa.float64(),
    "numeric": pa.float64(),
    "boolean": pa.bool_(),
    "text": pa.string(),
    "character varying": pa.string(),
    "character": pa.string(),
    "name": pa.string(),
    "date": pa.date32(),
    "time without time zone": pa.time64("us"),
    "timestamp without time zone": pa.timestamp("us"),
    "timestamp with time zone": pa.timestamp("us", tz="UTC"),
    "bytea": pa.binary(),
}
"""Declared type (``format_type`` without its modifier) -> Arrow type; any other type reads as its text."""
SERVER_CASTS = {"numeric": "float8"}
"""Types cast on the server before reading (numeric's Decimal values become doubles there)."""


def redact_uri(uri: str) -> str:
    """The URI without its password (in the user part or a ``password`` parameter)."""
    scheme, _, rest = uri.partition("://")
    location, mark, query = rest.partition("?")
    userinfo, at, hosts = location.rpartition("@")
    user = userinfo.partition(":")[0]
    kept = [(key, value) for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True) if key != "password"]
    tail = "?" + urllib.parse.urlencode(kept, safe="/") if mark and kept else ""
    return f"{scheme}://{user}{at}{hosts}{tail}"


def secrets(uri: str) -> list[str]:
    """The password of ``uri`` as written and percent-decoded (what ``scrub`` removes), longest first."""
    _, _, rest = uri.partition("://")
    location, _, query = rest.partition("?")
    userinfo = location.rpartition("@")[0]
    found = [userinfo.partition(":")[2]] if ":" in userinfo else []
    found += [value for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True) if key == "password"]
    found += [urllib.parse.unquote(value) for value in found]
    found += [value for value in query.split("&") if value.startswith("password=")]
    return sorted({value for value in found if value}, key=len, reverse=True)


def scrub(text: str, uri: str) -> str:
    """``text`` with the URI's password (and the URI itself) replaced by its redacted form."""
    text = text.replace(uri, redact_uri(uri))
    for secret in secrets(uri):
        text = text.replace(secret, "***")
    return text


def connect(uri: str) -> Any:
    """A psycopg connection (UTC session time zone) or a SourceError that names no password."""
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        raise SourceError(
            "reading Postgres needs the postgres extra: pip install 'semray[postgres]' (installs psycopg)"
        ) from None
    where = redact_uri(uri)
    try:
        if "connect_timeout" in conninfo_to_dict(uri):
            connection = psycopg.connect(uri, options="-c TimeZone=UTC")
        else:
            connection = psycopg.connect(uri, options="-c TimeZone=UTC", connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as error:
        detail = scrub(str(error).strip(), uri)
        advice = (
            " (a password is never stored in the catalog: give it in PGPASSWORD, PGPASSFILE or ~/.pgpass)"
            if "password" in detail
            else ""
        )
        raise SourceError(f"cannot connect to Postgres at {where}: {detail}{advice}") from None
    return connection


@dataclass(frozen=True, slots=True)
class PostgresRead:
    """Run ``sql`` on ``uri`` in one read-only transaction and yield ``_rowid`` + ``schema`` batches."""

    uri: str = field(repr=False)
    sql: str
    schema: pa.Schema
    batch_rows: int
    where: str

    def __call__(self) -> Iterator[pa.Table]:
        import psycopg

        connection = connect(self.uri)
        try:
            connection.read_only = True
            with connection.transaction(), connection.cursor(name="semray_read") as cursor:
                cursor.execute(self.sql)
                row = 0
                while rows := cursor.fetchmany(self.batch_rows):
                    yield self._table(rows, row)
                    row += len(rows)
        except (psycopg.Error, pa.ArrowException) as error:
            raise SourceError(f"cannot read {self.where}: {scrub(str(error).strip(), self.uri)}") from None
        finally:
            connection.close()

    def _table(self, rows: list[tuple[Any, ...]], row: int) -> pa.Table:
        columns = list(zip(*rows, strict=True)) if self.schema else []
        arrays = [pa.array(values, field.type) for values, field in zip(columns, self.schema, strict=True)]
        return with_rowids(pa.Table.from_arrays(arrays, schema=self.schema), numbered_ids(row, len(rows)))


@dataclass(frozen=True)
class PostgresSource:
    """A Postgres table, e.g. ``PostgresSource.open("postgresql://127.0.0.1/shop", {"table": "orders"})``."""

    uri: str = field(repr=False)
    """The URI as given, maybe with a password (never shown: errors name ``redact_uri(uri)``)."""
    schema_name: str
    table: str
    arrow_schema: pa.Schema
    declared: tuple[str, ...]
    """Each column's declared type (``format_type`` without modifiers), in column order."""
    order: tuple[str, ...]
    """What the rows are ordered by: the primary key's columns, ``ctid``, or nothing (a view)."""
    row_count: int | None
    kind: str = "postgres"

    @classmethod
    def open(cls, path: str | None, options: Options) -> PostgresSource:
        check_options("postgres", options, OPTIONS)
        if path is None or not path.startswith(SCHEMES):
            raise SourceError(f"a postgres source reads a postgresql:// URI, got {path!r}")
        table = option_str(options, "table")
        if not table:
            raise SourceError("a postgres source needs the option 'table' (its name as Postgres spells it)")
        schema = option_str(options, "schema", "public") or "public"
        connection = connect(path)
        import psycopg  # connect has checked the extra is installed

        try:
            return cls._inspect(connection, path, schema, table)
        except psycopg.Error as error:
            raise SourceError(f"cannot read postgres table {schema}.{table}: {scrub(str(error), path)}") from None
        finally:
            connection.close()

    @classmethod
    def _inspect(cls, connection: Any, uri: str, schema: str, table: str) -> PostgresSource:
        where = _describe(uri, schema, table)
        found = connection.execute(
            "SELECT c.oid, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'v', 'm', 'p', 'f')",
            (schema, table),
        ).fetchone()
        if found is None:
            names = [
                name
                for (name,) in connection.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
                )
            ]
            hint = suggest(table, names)
            advice = f"did you mean {hint!r}?" if hint else f"tables: {', '.join(sorted(names)) or 'none'}"
            raise SourceError(f"table {table!r} does not exist in schema {schema!r} of {redact_uri(uri)}; {advice}")
        oid, relkind = found
        columns = connection.execute(
            "SELECT attname, format_type(atttypid, NULL) FROM pg_attribute "
            "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (oid,),
        ).fetchall()
        arrow = pa.schema([pa.field(name, ARROW_TYPES.get(declared, pa.string())) for name, declared in columns])
        check_column_names(arrow, where)
        key = connection.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisprimary "
            "ORDER BY array_position(i.indkey::int2[], a.attnum)",
            (oid,),
        ).fetchall()
        order = tuple(name for (name,) in key) or (("ctid",) if relkind in ("r", "m") else ())
        relation = f"{quote_identifier(schema)}.{quote_identifier(table)}"
        (count,) = connection.execute(f"SELECT count(*) FROM {relation}").fetchone()
        if not count:
            raise SourceError(f"{where} is empty (0 rows); give a table with at least one row")
        return cls(
            uri=uri,
            schema_name=schema,
            table=table,
            arrow_schema=arrow,
            declared=tuple(declared for _, declared in columns),
            order=order,
            row_count=int(count),
        )

    def schema(self) -> pa.Schema:
        return self.arrow_schema

    def estimated_rows(self) -> int | None:
        return self.row_count

    def read_tasks(self, columns: Sequence[str] | None, batch_rows: int) -> list[ReadTask]:
        check_batch_rows(batch_rows)
        where = _describe(self.uri, self.schema_name, self.table)
        names = select_columns(self.arrow_schema, columns, where)
        declared = dict(zip(self.arrow_schema.names, self.declared, strict=True))
        selected = [_selected(name, declared[name]) for name in names] or ["NULL"]
        relation = f"{quote_identifier(self.schema_name)}.{quote_identifier(self.table)}"
        order = f" ORDER BY {', '.join(quote_identifier(name) if name != 'ctid' else name for name in self.order)}"
        sql = f"SELECT {', '.join(selected)} FROM {relation}{order if self.order else ''}"
        schema = project_schema(self.arrow_schema, names)
        read = PostgresRead(self.uri, sql, schema, batch_rows, where)
        return [ReadTask(read=read, estimated_rows=self.row_count)]

    def invalid_utf8_count(self) -> int:
        return 0  # Postgres checks text against the database encoding; psycopg decodes it.


def _selected(name: str, declared: str) -> str:
    quoted = quote_identifier(name)
    if declared in SERVER_CASTS:
        return f"{quoted}::{SERVER_CASTS[declared]}"
    return quoted if declared in ARROW_TYPES else f"{quoted}::text"


def _describe(uri: str, schema: str, table: str) -> str:
    return f"postgres table {schema}.{table} at {redact_uri(uri)}"
