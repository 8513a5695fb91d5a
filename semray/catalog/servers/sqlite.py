"""A SQLite database file: every table and view is a dataset (``shop.db`` table ``orders`` -> ``shop_orders``).

The file is hashed as a whole: when it is unchanged since the last ingest, none of its tables is
read again. Tables are read through the project's SQLite reader (read-only, authorizer on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semray.catalog.servers.base import ServerProfile
from semray.catalog.servers.database import profile_database
from semray.errors import SourceError
from semray.operators import SourceSpec

SQLITE_SUFFIXES = frozenset({".sqlite", ".sqlite3", ".db"})
SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True, slots=True)
class SqliteServer:
    """A SQLite file, e.g. ``SqliteServer("/data/shop.db")``."""

    uri: str
    kind: str = "sqlite"

    @classmethod
    def accepts(cls, target: str) -> bool:
        path = Path(target).expanduser()
        if not path.is_file():
            return False
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC or path.suffix.lower() in SQLITE_SUFFIXES

    def tables(self) -> list[str]:
        from semray.sources.sqlite_source import connect

        connection = connect(Path(self.uri))
        try:
            rows = connection.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' "
                "ORDER BY name"
            ).fetchall()
        except Exception as error:  # sqlite3.DatabaseError: not a database, encrypted, corrupt
            raise SourceError(f"cannot list the tables of sqlite database {self.uri!r}: {error}") from error
        finally:
            connection.close()
        return [str(name) for (name,) in rows]

    def profile(self, previous: Mapping[str, str]) -> ServerProfile:
        return profile_database(self, "sqlite", self.tables, previous)

    def scan(self, kind: str, uri: str, options: Mapping[str, Any]) -> SourceSpec:
        return SourceSpec(kind="sqlite", path=uri, options={"table": str(options["table"])})
