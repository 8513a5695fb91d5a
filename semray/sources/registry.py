"""``open_source``: one table from a source kind to its reader."""

from __future__ import annotations

from collections.abc import Callable

from semray.errors import SourceError, suggest
from semray.sources.base import Options, Source
from semray.sources.csv_source import CsvSource
from semray.sources.duckdb_source import DuckdbSource
from semray.sources.json_source import JsonSource
from semray.sources.memory_source import MemorySource
from semray.sources.parquet_source import ParquetSource
from semray.sources.postgres_source import PostgresSource
from semray.sources.sqlite_source import SqliteSource
from semray.sources.text_source import TextFolderSource

OPENERS: dict[str, Callable[[str | None, Options], Source]] = {
    "csv": CsvSource.open,
    "json": JsonSource.open,
    "parquet": ParquetSource.open,
    "text": TextFolderSource.open,
    "sqlite": SqliteSource.open,
    "duckdb": DuckdbSource.open,
    "postgres": PostgresSource.open,
    "memory": MemorySource.open,
}
"""Source kinds, matching ``semray.operators.SourceSpec.kind``."""


def open_source(kind: str, path: str | None, options: Options) -> Source:
    """Open a source and check it early: the path exists, is readable, has rows and a usable schema.

    >>> open_source("csv", "reviews.csv", {}).schema()  # doctest: +SKIP
    """
    opener = OPENERS.get(kind)
    if opener is None:
        hint = suggest(kind, OPENERS)
        advice = f"did you mean {hint!r}?" if hint else f"known kinds: {', '.join(OPENERS)}"
        raise SourceError(f"unknown source kind {kind!r}; {advice}")
    return opener(path, dict(options))
