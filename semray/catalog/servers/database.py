"""What SQLite and DuckDB servers share: hash the database file, profile every table when it changed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from semray.catalog.profiling import profile_source
from semray.catalog.servers.base import FileState, ProfiledTable, ServerProfile, hash_file, normalise_name
from semray.errors import SourceError
from semray.log import get_logger
from semray.sources import open_source

log = get_logger(__name__)


class _FileServer(Protocol):
    @property
    def uri(self) -> str: ...


def profile_database(
    server: _FileServer, kind: str, list_tables: Callable[[], list[str]], previous: Mapping[str, str]
) -> ServerProfile:
    """Profile every table of the database file ``server.uri`` unless its hash equals ``previous``'s."""
    path = Path(server.uri)
    relative = path.name
    content_hash = hash_file(path)
    size = path.stat().st_size
    names = list_tables()
    suffixes = {table: normalise_name(table) for table in names}
    if previous.get(relative) == content_hash:
        return ServerProfile(
            unchanged_tables=tuple(suffixes.values()),
            files=(FileState(relative, content_hash, size, "read"),),
            found={kind: len(names)},
        )
    tables: list[ProfiledTable] = []
    skipped: list[FileState] = []
    for table in names:
        try:
            profile = profile_source(open_source(kind, str(path), {"table": table}))
        except SourceError as error:
            log.warning("catalog_table_skipped", database=str(path), table=table, reason=str(error))
            skipped.append(FileState(f"{relative}#{table}", content_hash, size, "skipped", f"table {table!r}: {error}"))
            continue
        tables.append(
            ProfiledTable(
                suffix=suffixes[table],
                kind=kind,
                uri=str(path),
                options={"table": table},
                profile=profile,
                schema_status="declared",
                content_hash=content_hash,
            )
        )
    files = (
        FileState(
            relative, content_hash, size, "read" if tables else "skipped", None if tables else "no readable table"
        ),
        *skipped,
    )
    return ServerProfile(tables=tuple(tables), files=files, found={f"{kind} tables": len(names)})
