"""A DuckDB database file: every table and view is a dataset (``main`` schema tables by name,
others as ``schema.table``). Opened read-only with external access off, like the DuckDB reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from semray.catalog.servers.base import ServerProfile
from semray.catalog.servers.database import profile_database
from semray.errors import SourceError
from semray.operators import SourceSpec

DUCKDB_SUFFIXES = frozenset({".duckdb", ".ddb"})


@dataclass(frozen=True, slots=True)
class DuckdbServer:
    """A DuckDB file, e.g. ``DuckdbServer("/data/warehouse.duckdb")``."""

    uri: str
    kind: str = "duckdb"

    @classmethod
    def accepts(cls, target: str) -> bool:
        path = Path(target).expanduser()
        return path.is_file() and path.suffix.lower() in DUCKDB_SUFFIXES

    def tables(self) -> list[str]:
        from semray.sources.duckdb_source import connect

        connection = connect(Path(self.uri))
        try:
            rows = connection.execute(
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_catalog = current_database() ORDER BY table_schema, table_name"
            ).fetchall()
        except duckdb.Error as error:
            raise SourceError(f"cannot list the tables of duckdb database {self.uri!r}: {error}") from error
        finally:
            connection.close()
        return [str(name) if schema == "main" else f"{schema}.{name}" for schema, name in rows]

    def profile(self, previous: Mapping[str, str]) -> ServerProfile:
        return profile_database(self, "duckdb", self.tables, previous)

    def scan(self, kind: str, uri: str, options: Mapping[str, Any]) -> SourceSpec:
        return SourceSpec(kind="duckdb", path=uri, options={"table": str(options["table"])})
