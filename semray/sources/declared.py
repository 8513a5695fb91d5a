"""A plan's declared source columns checked against what the source holds.

A JSON plan carries each Scan's ``source_schema``: the columns, and their types, that every
operator above it was typed against. A plan written by hand, by a model, or exported before the
data changed can declare a column the source lacks, or a type the source does not read: the
run would then fail deep in a Ray task (``KeyError: Field "x" does not exist``,
``ArrowInvalid: Failed to parse string``). ``check_declared_schema`` compares the two when the
plan is loaded and names the first disagreement and its fix. Declaring fewer columns than the
source has is fine: a plan may read a subset.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pyarrow as pa

from semray.errors import SourceError, suggest
from semray.sources.base import Source

_FIX = "re-export the plan from this data (Query.to_json, semray sql --explain) or correct its source_schema"


def check_declared_schema(source: Source, declared: Sequence[tuple[str, str]], where: str) -> None:
    """Raise SourceError unless every declared ``(name, type)`` is a column of ``source`` of that type.

    Types are compared as DuckDB spells them, so ``int8`` and ``BIGINT`` agree.

    >>> from semray.sources.memory_source import MemorySource
    >>> source = MemorySource(ref="t", table=pa.table({"id": [1], "text": ["x"]}), task_rows=10)
    >>> check_declared_schema(source, [("id", "int8")], "memory:t")
    >>> check_declared_schema(source, [("txt", "VARCHAR")], "memory:t")
    Traceback (most recent call last):
    ...
    semray.errors.SourceError: memory:t: the plan's source_schema declares column 'txt', which the source ...
    """
    actual = duckdb_types(source.schema())
    for name, kind in declared:
        if name not in actual:
            hint = suggest(name, list(actual))
            advice = f"did you mean {hint!r}?" if hint else f"its columns: {', '.join(actual)}"
            raise SourceError(
                f"{where}: the plan's source_schema declares column {name!r}, which the source does not have "
                f"({advice}); {_FIX}"
            )
        wanted = _canonical(kind)
        if wanted != actual[name]:
            raise SourceError(
                f"{where}: the plan's source_schema declares column {name!r} as {kind}, but the source reads it "
                f"as {actual[name]}; every operator of the plan was typed against the declared type, so give "
                f"{actual[name]}: {_FIX}"
            )


def duckdb_types(schema: pa.Schema) -> dict[str, str]:
    """Each column's type as DuckDB names it, e.g. ``{"id": "BIGINT"}`` for an int64 column."""
    relation = _connection().from_arrow(pa.Table.from_batches([], schema=schema))
    return {name: str(kind) for name, kind in zip(relation.columns, relation.types, strict=True)}


def _canonical(kind: str) -> str:
    try:
        return str(duckdb.sqltype(kind))
    except duckdb.Error:
        return kind  # an unknown type is refused where the plan is parsed; here it only disagrees


def _connection() -> duckdb.DuckDBPyConnection:
    return duckdb.connect(config={"enable_external_access": False})
