"""Data servers the catalog registers: one module per kind, each with ``profile()`` and ``scan()``.

Adding a kind is one module with a class like ``FolderServer`` (``accepts``, ``profile``, ``scan``)
and one line in ``SERVER_KINDS``; the first kind that accepts a target serves it.

>>> open_server("postgresql://127.0.0.1/shop").kind
'postgres'
"""

from __future__ import annotations

from pathlib import Path

from semray.catalog.servers.base import DataServer, ServerProfile, dataset_name, normalise_name
from semray.catalog.servers.duckdb import DuckdbServer
from semray.catalog.servers.folder import FolderServer
from semray.catalog.servers.postgres import PostgresServer
from semray.catalog.servers.sqlite import SqliteServer
from semray.errors import CatalogError

SERVER_KINDS: dict[str, type[PostgresServer | DuckdbServer | SqliteServer | FolderServer]] = {
    "postgres": PostgresServer,
    "duckdb": DuckdbServer,
    "sqlite": SqliteServer,
    "folder": FolderServer,
}
"""Server kinds, tried in this order (a database file before the folder that would take any file)."""


def open_server(target: str, kind: str | None = None) -> DataServer:
    """The data server for a path or URI (``kind`` forces one), its path resolved."""
    uri = target if PostgresServer.accepts(target) else str(Path(target).expanduser().resolve())
    if kind is not None:
        if kind not in SERVER_KINDS:
            raise CatalogError(f"unknown data server kind {kind!r}; kinds: {', '.join(SERVER_KINDS)}")
        return SERVER_KINDS[kind](uri)
    for server in SERVER_KINDS.values():
        if server.accepts(uri):
            return server(uri)
    if not Path(uri).exists():
        raise CatalogError(f"{target!r} does not exist; give a folder, a file, a SQLite/DuckDB file or a postgres URI")
    raise CatalogError(
        f"{target!r} is not a folder, a tabular or document file, a SQLite/DuckDB file or a postgres URI"
    )


__all__ = ["SERVER_KINDS", "DataServer", "ServerProfile", "dataset_name", "normalise_name", "open_server"]
