"""A Postgres database by URI (``postgresql://user@host/db``): every table and view of its non-system schemas.

Optional: needs the ``postgres`` extra (``pip install 'semray[postgres]'``, which installs
``psycopg``), imported only when such a server is added. Each table is profiled through the
Postgres reader (``semray.sources.postgres_source``), which is also what a plan's Scan of it reads.

A table's content hash is computed on the server (``CONTENT_HASH_SQL``: the row count and the sum of
each row's md5, so no row leaves the server and the order of rows does not matter): a refresh
profiles only the tables whose hash changed. The password is never stored: ``uri`` is the URI
without it (what the catalog records), errors are scrubbed of it, and a later scan or refresh finds
it where libpq looks (``PGPASSWORD``, ``PGPASSFILE``, ``~/.pgpass``).

>>> PostgresServer("postgresql://ann:s3cret@127.0.0.1/shop").uri
'postgresql://ann@127.0.0.1/shop'
>>> PostgresServer("postgresql://ann@/my%20shop?host=/run/postgresql").database
'my shop'
"""

from __future__ import annotations

import urllib.parse
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from semray.catalog.profiling import profile_source
from semray.catalog.servers.base import FileState, ProfiledTable, ServerProfile, normalise_name
from semray.errors import CatalogError, SourceError
from semray.log import get_logger
from semray.operators import SourceSpec
from semray.sources.postgres_source import SCHEMES, PostgresSource, connect, redact_uri, scrub

log = get_logger(__name__)

CONTENT_HASH_SQL = (
    "SELECT count(*)::text || ':' || coalesce(sum(('x' || substr(md5(t::text), 1, 15))::bit(60)::bigint), 0)::text "
    "FROM {} AS t"
)
"""A table's content hash, on the server: row count and the sum of the first 60 bits of each row's md5."""

TABLES_SQL = (
    "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.relkind IN ('r', 'v', 'm', 'p', 'f') AND NOT c.relispartition "
    "AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%' "
    "AND n.nspname NOT LIKE 'pg\\_temp%%' ORDER BY 1, 2"
)
"""Tables, views, materialized views, partitioned and foreign tables (not their partitions), by schema and name."""


@dataclass(frozen=True, slots=True)
class PostgresServer:
    """A Postgres database, e.g. ``PostgresServer("postgresql://127.0.0.1/shop")``."""

    connection_uri: str = field(repr=False)
    """The URI as given, maybe with a password: used to connect, never stored or shown."""
    kind: str = "postgres"

    @classmethod
    def accepts(cls, target: str) -> bool:
        return target.startswith(SCHEMES)

    @property
    def uri(self) -> str:
        """The URI without its password: what the catalog records and errors show."""
        return redact_uri(self.connection_uri)

    @property
    def database(self) -> str:
        """The database's name (the server's default name in the catalog)."""
        path = self.uri.partition("://")[2].partition("?")[0].rpartition("@")[2]
        return urllib.parse.unquote(path.partition("/")[2]) or "postgres"

    def profile(self, previous: Mapping[str, str]) -> ServerProfile:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise CatalogError(
                "a Postgres server needs the postgres extra: pip install 'semray[postgres]' (installs psycopg)"
            ) from None
        tables, hashes = self._tables()
        suffixes = _suffixes(tables)
        profiled: list[ProfiledTable] = []
        unchanged: list[str] = []
        files: list[FileState] = []
        for schema, name in tables:
            relative = f"{schema}.{name}"
            suffix = suffixes[(schema, name)]
            content_hash = hashes[(schema, name)]
            if previous.get(relative) == content_hash:
                unchanged.append(suffix)
                continue
            try:
                source = PostgresSource.open(self.connection_uri, {"schema": schema, "table": name})
                profile = profile_source(source)
            except SourceError as error:
                reason = scrub(str(error), self.connection_uri)
                log.warning("catalog_table_skipped", server=self.uri, table=relative, reason=reason)
                files.append(FileState(relative, content_hash, 0, "skipped", reason, dataset_suffix=suffix))
                continue
            files.append(FileState(relative, content_hash, 0, "read", dataset_suffix=suffix))
            profiled.append(
                ProfiledTable(
                    suffix=suffix,
                    kind="postgres",
                    uri=self.uri,
                    options={"schema": schema, "table": name},
                    profile=profile,
                    schema_status="declared",
                    content_hash=content_hash,
                )
            )
        return ServerProfile(
            tables=tuple(profiled),
            unchanged_tables=tuple(unchanged),
            files=tuple(files),
            found={"postgres tables": len(tables)},
        )

    def _tables(self) -> tuple[list[tuple[str, str]], dict[tuple[str, str], str]]:
        """Every table (schema, name) and its content hash ("" when it cannot be read), in one read-only transaction."""
        import psycopg
        from psycopg import sql

        connection = self._connect()
        try:
            connection.read_only = True
            with connection.transaction():
                tables = [(str(schema), str(name)) for schema, name in connection.execute(TABLES_SQL)]
                hashes: dict[tuple[str, str], str] = {}
                for schema, name in tables:
                    query = sql.SQL(CONTENT_HASH_SQL).format(sql.Identifier(schema, name))
                    try:
                        with connection.transaction():  # a savepoint: a view that fails leaves the rest readable
                            hashes[(schema, name)] = str(connection.execute(query).fetchone()[0])
                    except psycopg.Error:
                        hashes[(schema, name)] = ""  # its profile fails too, and says why
        except psycopg.Error as error:
            raise CatalogError(
                f"cannot list the tables of {self.uri}: {scrub(str(error), self.connection_uri)}"
            ) from None
        finally:
            connection.close()
        return tables, hashes

    def _connect(self) -> Any:
        try:
            return connect(self.connection_uri)
        except SourceError as error:
            raise CatalogError(str(error)) from None

    def scan(self, kind: str, uri: str, options: Mapping[str, Any]) -> SourceSpec:
        if kind != "postgres":
            raise CatalogError(f"a postgres server has no {kind!r} datasets; re-add it with `semray catalog add`")
        table = str(options["table"])
        schema = str(options.get("schema") or "public")
        return SourceSpec(kind="postgres", path=redact_uri(uri), options={"schema": schema, "table": table})


def _suffixes(tables: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Each table's name within the server: its name (``schema_name`` outside ``public``), numbered on a clash.

    >>> _suffixes([("public", "Orders"), ("public", "orders"), ("sales", "q1")])
    {('public', 'Orders'): 'orders', ('public', 'orders'): 'orders_2', ('sales', 'q1'): 'sales_q1'}
    """
    plain = {table: normalise_name(table[1] if table[0] == "public" else f"{table[0]}_{table[1]}") for table in tables}
    seen: Counter[str] = Counter()
    names: dict[tuple[str, str], str] = {}
    for table in tables:
        seen[plain[table]] += 1
        count = seen[plain[table]]
        names[table] = plain[table] if count == 1 else f"{plain[table]}_{count}"
    return names
