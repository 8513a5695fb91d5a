"""What a database source reads: a ``table`` or a ``query`` (exactly one), shared by sqlite and duckdb."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from semray.errors import SourceError, suggest
from semray.sources.base import Options, option_str
from semray.sources.paths import resolve_files


@dataclass(frozen=True, slots=True)
class SqlTarget:
    """``SqlTarget(table="reviews")`` or ``SqlTarget(query="SELECT ...")``."""

    table: str | None = None
    query: str | None = None

    @classmethod
    def from_options(cls, kind: str, options: Options) -> SqlTarget:
        table = option_str(options, "table")
        query = option_str(options, "query")
        if (table is None) == (query is None):
            raise SourceError(f"a {kind} source needs exactly one of the options 'table' or 'query'")
        if query is not None:
            query = query.strip().rstrip(";").strip()
            if not query:
                raise SourceError(f"the {kind} 'query' option is empty; give a SELECT statement")
        return cls(table=table, query=query)

    def describe(self, path: Path) -> str:
        return f"table {self.table!r} in {str(path)!r}" if self.table else f"query on {str(path)!r}"


def database_file(path: str | None, kind: str) -> Path:
    """The single database file a sqlite/duckdb source reads (checked to exist and be readable)."""
    files = resolve_files(path, kind, ())
    if files.multi:
        raise SourceError(f"a {kind} source reads one database file, but {path!r} is a folder or a pattern")
    return files.files[0]


def missing_table(table: str, path: Path, tables: list[str]) -> SourceError:
    hint = suggest(table, tables)
    advice = f"did you mean {hint!r}?" if hint else f"tables: {', '.join(tables) or 'none'}"
    return SourceError(f"table {table!r} does not exist in {str(path)!r}; {advice}")


def split_ranges(low: int, high: int, parts: int) -> list[tuple[int, int]]:
    """Split the inclusive range ``[low, high]`` into ``parts`` contiguous inclusive ranges.

    >>> split_ranges(1, 10, 3)
    [(1, 4), (5, 8), (9, 10)]
    """
    parts = max(1, min(parts, high - low + 1))
    step = -(-(high - low + 1) // parts)
    return [(start, min(start + step - 1, high)) for start in range(low, high + 1, step)]
