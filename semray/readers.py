"""The readers: sources, SQL and JSON plans into a ``Query`` (``semray/query.py``).

``semray.api`` re-exports them as the public surface; code inside semray imports them from
here, so nothing in the library imports ``semray.api`` (docs/architecture.md, "Layering").

>>> import semray
>>> q = semray.read_csv("reviews.csv").filter("rating >= 4").select("product", "rating")  # doctest: +SKIP
>>> q.collect()  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from semray.errors import SourceError
from semray.operators import Node, Scan, Schema, SourceSpec, walk
from semray.operators.relational import CatalogPin
from semray.operators.semantic import QualityTarget
from semray.query import OptionValue, Query
from semray.settings import Settings
from semray.sources import open_source, register_table
from semray.sources.declared import check_declared_schema
from semray.sources.memory_source import registered_table


def _scan(
    kind: str,
    path: str | None,
    options: Mapping[str, OptionValue],
    settings: Settings | None,
    catalog: CatalogPin | None = None,
) -> Query:
    clean = {key: value for key, value in options.items() if value is not None}
    if path is not None and kind not in ("memory", "postgres"):  # a postgres path is a URI, not a file
        path = _absolute(path)
    source = open_source(kind, path, clean)
    spec = SourceSpec(kind=kind, path=path, options=clean, catalog=catalog)
    schema = Schema.from_arrow(source.schema())
    if not schema.columns:
        raise SourceError(f"{spec.describe()} has no columns")
    return Query(Scan(source=spec, source_schema=schema), settings)


def _absolute(path: str) -> str:
    """The path with links resolved; a link loop, which cannot be resolved, is left for ``open_source``
    to name (``semray.sources.paths``: a SourceError saying it is a symbolic link loop)."""
    expanded = Path(path).expanduser()
    try:
        return str(expanded.resolve())
    except (RuntimeError, OSError):  # RuntimeError("Symlink loop from ...") up to Python 3.12, OSError after
        return str(expanded.absolute())


def read_csv(path: str | Path, settings: Settings | None = None, **options: OptionValue) -> Query:
    return _scan("csv", str(path), options, settings)


def read_json(path: str | Path, settings: Settings | None = None, **options: OptionValue) -> Query:
    return _scan("json", str(path), options, settings)


def read_parquet(path: str | Path, settings: Settings | None = None, **options: OptionValue) -> Query:
    return _scan("parquet", str(path), options, settings)


def read_text(path: str | Path, settings: Settings | None = None, **options: OptionValue) -> Query:
    """One row per file of a folder, with columns ``path`` and ``text``."""
    return _scan("text", str(path), options, settings)


def read_sql(
    path: str | Path, table: str | None = None, query: str | None = None, settings: Settings | None = None
) -> Query:
    """A table (or query) of a SQLite or DuckDB database file, by its extension."""
    suffix = Path(path).suffix.lower()
    kind = "duckdb" if suffix in (".duckdb", ".ddb") else "sqlite"
    return _scan(kind, str(path), {"table": table, "query": query}, settings)


def read_catalog(name: str, settings: Settings | None = None, version: int | None = None) -> Query:
    """A query over a catalogued dataset by name (``semray catalog ls``), at the latest or a given catalog version.

    The Scan is pinned to that version (``SourceSpec.catalog``, shown in EXPLAIN as ``catalog:NAME@vN``
    and kept in JSON plans): a re-run reads the same version, and SemSearch over a documents dataset
    ranks by the catalog's segments instead of embedding every row. An unknown name or version is a
    ``CatalogError`` saying what exists.

    >>> read_catalog("notes").sem_search("text", "chest pain", k=5, mode="hybrid")  # doctest: +SKIP
    """
    from semray.catalog.store import Catalog

    spec = Catalog.open(settings or Settings(), version=version).pinned_scan(name)
    return _scan(spec.kind, spec.path, spec.options, settings, spec.catalog)


def from_arrow(table: pa.Table, name: str | None = None, settings: Settings | None = None) -> Query:
    """A query over an in-memory Arrow table (not savable as a JSON plan)."""
    # The content digest goes into the plan, so a run journaled for one table is never
    # resumed (and its answers reused) for another table of the same name.
    label = name or "arrow table"
    ref = f"{label}@{_digest(table)}"
    try:
        registered_table(ref)  # the same content under the same name: one registration
    except SourceError:
        ref = register_table(table, ref)
    return _scan("memory", None, {"ref": ref, "name": label}, settings)


def _digest(table: pa.Table) -> str:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.blake2b(sink.getvalue().to_pybytes(), digest_size=8).hexdigest()


def from_pandas(frame: Any, name: str | None = None, settings: Settings | None = None) -> Query:
    return from_arrow(pa.Table.from_pandas(frame, preserve_index=False), name or "pandas frame", settings)


def load_plan(path: str | Path, settings: Settings | None = None) -> Query:
    """A query from a JSON plan file (``semray run plan.json``); UTF-8 only, errors name the JSON path."""
    from semray.operators.serialize import plan_from_file

    return plan_query(plan_from_file(path), settings)


def plan_query(plan: Node, settings: Settings | None = None) -> Query:
    """A query over a plan read from JSON, once each Scan's declared ``source_schema`` agrees with its
    source: a column the source lacks, or reads as another type, is a ``SourceError`` now, not a Ray
    task's ``KeyError`` mid-run (``semray.sources.declared``)."""
    for node in walk(plan):
        if isinstance(node, Scan):
            source = open_source(node.source.kind, node.source.path, node.source.options)
            declared = [(column.name, column.type) for column in node.source_schema.columns]
            check_declared_schema(source, declared, node.source.describe())
    return Query(plan, settings)


SUFFIX_KINDS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".duckdb": "duckdb",
    ".ddb": "duckdb",
    ".sqlite": "sqlite",
    ".sqlite3": "sqlite",
    ".db": "sqlite",
}


def sql(
    query: str,
    tables: Mapping[str, Any],
    settings: Settings | None = None,
    quality: QualityTarget | float | None = None,
) -> Query:
    """Compile SQL with ``SEM_*`` functions over named tables into a Query.

    Tables are paths (by extension; a folder is read as text files), pandas frames,
    Arrow tables or Queries: ``semray.sql("SELECT * FROM r WHERE rating > 3", {"r": "r.csv"})``.
    ``quality`` runs the semantic filters, classifications and scores as cascades (`Query.with_quality`).
    """
    from semray.sql import compile_sql

    nodes = {name: table_query(value, name, settings).plan for name, value in tables.items()}
    compiled = Query(compile_sql(query, nodes), settings)
    return compiled.with_quality(quality) if quality is not None else compiled


def table_query(value: Any, name: str, settings: Settings | None = None) -> Query:
    """A Query over a path, pandas frame, Arrow table or Query."""
    if isinstance(value, Query):
        return value
    if isinstance(value, pa.Table):
        return from_arrow(value, name, settings)
    if isinstance(value, str | Path):
        path = Path(value).expanduser()
        if path.is_dir() and not any(path.glob("*.parquet")):
            return read_text(path, settings)
        kind = "parquet" if path.is_dir() else SUFFIX_KINDS.get(path.suffix.lower())
        if kind is None:
            known = ", ".join(sorted(SUFFIX_KINDS))
            raise SourceError(f"cannot tell the format of {str(path)!r} from its extension; use one of {known}")
        if kind in ("sqlite", "duckdb"):
            return _scan(kind, str(path), {"table": name}, settings)
        return _scan(kind, str(path), {}, settings)
    if hasattr(value, "to_numpy") and hasattr(value, "columns"):
        return from_pandas(value, name, settings)
    raise SourceError(
        f"table {name!r}: expected a path, pandas DataFrame, Arrow table or Query, got {type(value).__name__}"
    )
