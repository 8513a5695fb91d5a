"""A Postgres database by URI (``postgresql://user@host/db``): every table of its non-system schemas.

Optional: needs the ``postgres`` extra (``pip install 'semray[postgres]'``, which installs
``psycopg``), imported only when such a server is added. Tables are profiled by streaming them
through a server-side cursor; semray has no Postgres reader for Scan yet, so a query over one of
these datasets is refused with that reason (profiles, search and the planner's view still work).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from semray.catalog.profiling import profile_batches
from semray.catalog.servers.base import FileState, ProfiledTable, ServerProfile, normalise_name
from semray.errors import CatalogError
from semray.operators import SourceSpec

SCHEMES = ("postgres://", "postgresql://")
BATCH_ROWS = 10_000


@dataclass(frozen=True, slots=True)
class PostgresServer:
    """A Postgres database, e.g. ``PostgresServer("postgresql://127.0.0.1/shop")``."""

    uri: str
    kind: str = "postgres"

    @classmethod
    def accepts(cls, target: str) -> bool:
        return target.startswith(SCHEMES)

    def _connect(self) -> Any:
        try:
            import psycopg
        except ImportError:
            raise CatalogError(
                "a Postgres server needs the postgres extra: pip install 'semray[postgres]' (installs psycopg)"
            ) from None
        try:
            return psycopg.connect(self.uri)
        except psycopg.Error as error:
            raise CatalogError(f"cannot connect to {self._safe_uri()}: {error}") from None

    def _safe_uri(self) -> str:
        scheme, _, rest = self.uri.partition("://")
        return f"{scheme}://{rest.rpartition('@')[2]}"

    def profile(self, previous: Mapping[str, str]) -> ServerProfile:
        connection = self._connect()
        try:
            tables = connection.execute(
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2"
            ).fetchall()
            profiled = [self._profile_table(connection, schema, name) for schema, name in tables]
        finally:
            connection.close()
        state = FileState(self._safe_uri(), "", 0, "read")
        return ServerProfile(tables=tuple(profiled), files=(state,), found={"postgres tables": len(tables)})

    def _profile_table(self, connection: Any, schema: str, name: str) -> ProfiledTable:
        qualified = f"{schema}.{name}" if schema != "public" else name
        batches = _table_batches(connection, schema, name)  # streamed: one batch of rows at a time
        first = next(batches, None)
        arrow_schema = first.schema if first is not None else pa.schema([])
        profile = profile_batches(arrow_schema, itertools.chain([] if first is None else [first], batches))
        return ProfiledTable(
            suffix=normalise_name(qualified),
            kind="postgres",
            uri=self._safe_uri(),
            options={"table": qualified},
            profile=profile,
            schema_status="declared",
            content_hash="",
        )

    def scan(self, kind: str, uri: str, options: Mapping[str, Any]) -> SourceSpec:
        raise CatalogError(
            f"postgres table {options.get('table')!r} is catalogued but cannot be queried yet: semray.sources has "
            "no Postgres reader; export it to parquet and `semray catalog add` that"
        )


def _table_batches(connection: Any, schema: str, name: str) -> Iterator[pa.Table]:
    from psycopg import sql

    with connection.cursor(name=f"semray_profile_{schema}_{name}") as cursor:
        cursor.execute(sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(name)))
        while rows := cursor.fetchmany(BATCH_ROWS):
            columns = [column.name for column in cursor.description]
            yield pa.Table.from_pylist([dict(zip(columns, row, strict=True)) for row in rows])
