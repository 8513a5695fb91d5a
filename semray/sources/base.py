"""What every reader gives the pipeline: a ``Source`` with a schema and picklable ``ReadTask`` s.

A read task yields Arrow tables whose first column is ``_rowid`` (a string that is
stable across runs and unique within the source), followed by the requested columns
in source order. Row ids never depend on how the source is split into tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import pyarrow as pa

from semray.errors import SourceError, suggest

ROW_ID = "_rowid"
"""The row-id column every read task puts first (same name as ``semray.operators.ROW_ID``)."""

OptionValue = str | int | float | bool | None
Options = Mapping[str, OptionValue]


@dataclass(frozen=True, slots=True)
class ReadTask:
    """One unit of parallel reading; runs in a Ray worker, so it must pickle.

    ``read`` is a picklable callable (a frozen dataclass of a reader module) that
    yields tables of about ``batch_rows`` rows each.

    >>> task = ReadTask(read=lambda: iter([]), estimated_rows=0)
    >>> list(task())
    []
    """

    read: Callable[[], Iterator[pa.Table]]
    estimated_rows: int | None = None
    estimated_bytes: int | None = None
    input_files: tuple[str, ...] = ()

    def __call__(self) -> Iterator[pa.Table]:
        return iter(self.read())


@runtime_checkable
class Source(Protocol):
    """A readable source, e.g. ``open_source("csv", "reviews.csv", {})``."""

    @property
    def kind(self) -> str:
        """One of ``OPENERS``: csv, json, parquet, text, sqlite, duckdb, postgres, memory."""
        ...

    def schema(self) -> pa.Schema:
        """The source's columns, without ``_rowid``."""
        ...

    def read_tasks(self, columns: Sequence[str] | None, batch_rows: int) -> list[ReadTask]:
        """Tasks that together yield every row once; ``columns=None`` reads all columns."""
        ...

    def estimated_rows(self) -> int | None:
        """Row count (exact where the format records it), or None when unknown."""
        ...

    def invalid_utf8_count(self) -> int:
        """Rows (files, for text folders) whose bytes were not valid UTF-8 and got replacement characters.

        Text readers replace bad bytes only under ``encoding_errors="replace"``; by default such a
        file fails its read with a SourceError (``semray.sources.encoding``), so the count is 0.
        """
        ...


def check_options(kind: str, options: Options, allowed: frozenset[str]) -> None:
    """Raise SourceError for an option the reader does not know, suggesting the closest."""
    for name in options:
        if name not in allowed:
            hint = suggest(name, allowed)
            known = ", ".join(sorted(allowed)) or "none"
            advice = f"did you mean {hint!r}?" if hint else f"known options: {known}"
            raise SourceError(f"unknown option {name!r} for a {kind} source; {advice}")


def option_str(options: Options, name: str, default: str | None = None) -> str | None:
    value = options.get(name, default)
    if value is None:
        return None
    if not isinstance(value, str):
        raise SourceError(f"option {name!r} must be a string, got {value!r}")
    return value


def option_int(options: Options, name: str, default: int, minimum: int = 1) -> int:
    value = options.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SourceError(f"option {name!r} must be an integer >= {minimum}, got {value!r}")
    return value


def option_bool(options: Options, name: str, default: bool) -> bool:
    value = options.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise SourceError(f"option {name!r} must be true or false, got {value!r}")
    return value


def check_column_names(schema: pa.Schema, where: str) -> None:
    """Every source column can be told apart in SQL: no ``_rowid`` (the reader adds that column
    itself), and no two names equal once case is ignored. DuckDB, which evaluates every plan
    expression, folds identifier case, so with columns ``a`` and ``A`` the expression ``"A"``
    silently reads ``a``.

    >>> check_column_names(pa.schema([("id", pa.int64()), ("ID", pa.int64())]), "CSV 'a.csv'")
    Traceback (most recent call last):
    ...
    semray.errors.SourceError: CSV 'a.csv' has columns 'id' and 'ID', which differ only in case; ...
    """
    seen: dict[str, str] = {}
    for name in schema.names:
        if name.lower() == ROW_ID:
            raise SourceError(f"{where} has a column named {name!r}, which semray reserves for row ids; rename it")
        first = seen.setdefault(name.lower(), name)
        if first == name and schema.names.count(name) > 1:
            raise SourceError(
                f"{where} has two columns named {name!r}; semray would read only one of them, so rename one"
            )
        if first != name:
            raise SourceError(
                f"{where} has columns {first!r} and {name!r}, which differ only in case; SQL folds the case of "
                "column names, so an expression naming one could read the other: rename one"
            )


def check_batch_rows(batch_rows: int) -> None:
    if batch_rows < 1:
        raise SourceError(f"batch_rows must be at least 1, got {batch_rows}")


def select_columns(schema: pa.Schema, columns: Sequence[str] | None, where: str) -> list[str]:
    """The requested columns in source order (all when ``columns`` is None).

    >>> select_columns(pa.schema([("a", pa.int64()), ("b", pa.string())]), ["b", "a"], "t")
    ['a', 'b']
    """
    names = list(schema.names)
    if columns is None:
        return names
    wanted = set(columns)
    for name in columns:
        if name not in names:
            hint = suggest(name, names)
            advice = f"did you mean {hint!r}?" if hint else f"columns: {', '.join(names) or 'none'}"
            raise SourceError(f"column {name!r} not found in {where}; {advice}")
    return [name for name in names if name in wanted]


def project_schema(schema: pa.Schema, names: Sequence[str]) -> pa.Schema:
    return pa.schema([schema.field(name) for name in names])
