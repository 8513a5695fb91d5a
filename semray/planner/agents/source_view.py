"""A catalog view over files named on the command line: each profiled when opened.

``SourceCatalog`` profiles CSV, JSON and Parquet files (and the other source kinds) with the
same readers a Scan uses: schema, row count, the first rows as samples, min/max/distinct over
them. Search is lexical (question words against names, columns and sample values). It serves
``semray ask --table NAME=PATH`` where no LanceDB catalog exists, and tests. ``ListMemory`` is
long-term memory held in a list (optionally a JSON file), recalled by word overlap.

>>> catalog = SourceCatalog.from_paths({"reviews": "reviews.csv"})  # doctest: +SKIP
>>> catalog.describe("reviews").schema().names  # doctest: +SKIP
('review', 'rating')
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from semray.errors import SourceError, TableNotFoundError
from semray.operators import Schema
from semray.planner.agents.catalog_view import ColumnProfile, DatasetHit, DatasetProfile, MemoryRecord, SegmentHit
from semray.sources import ROW_ID, open_source

SAMPLE_ROWS = 200
"""Rows read for samples and statistics (the first rows of the first read task)."""
KINDS = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet", ".db": "sqlite"}
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> frozenset[str]:
    """Lower-case words of a text, for lexical matching.

    >>> sorted(words("Average rating_of Reviews"))
    ['average', 'of', 'rating', 'reviews']
    """
    return frozenset(_WORD.findall(text.lower()))


def profile_source(name: str, path: str | Path, kind: str | None = None) -> DatasetProfile:
    """Profile one file: schema, row count, samples and statistics over its first rows."""
    file = Path(path).expanduser().resolve()
    kind = kind or KINDS.get(file.suffix.lower()) or ("text" if file.is_dir() else "")
    if not kind:
        raise SourceError(f"cannot tell the format of {str(file)!r}; name it .csv, .json, .jsonl or .parquet")
    source = open_source(kind, str(file), {})
    schema = Schema.from_arrow(source.schema())
    tasks = source.read_tasks(None, SAMPLE_ROWS)
    first = next(iter(tasks[0]()), None) if tasks else None
    table = first.drop_columns([ROW_ID]).slice(0, SAMPLE_ROWS) if first is not None else None
    columns = tuple(_column(column.name, column.type, table) for column in schema.columns)
    samples = tuple(table.slice(0, 5).to_pylist()) if table is not None else ()
    return DatasetProfile(
        name=name, kind=kind, uri=str(file), columns=columns, row_count=source.estimated_rows(), samples=samples
    )


def _column(name: str, kind: str, table: pa.Table | None) -> ColumnProfile:
    if table is None:
        return ColumnProfile(name=name, type=kind)
    values = [value for value in table.column(name).to_pylist() if value is not None]
    nulls = table.num_rows - len(values)
    ordered = sorted(values, key=str) if values and not isinstance(values[0], (int, float)) else sorted(values)
    counts: dict[str, int] = {}
    for value in values:
        counts[str(value)] = counts.get(str(value), 0) + 1
    top = tuple(value[:60] for value, _ in sorted(counts.items(), key=lambda item: -item[1])[:5])
    return ColumnProfile(
        name=name,
        type=kind,
        nulls=nulls,
        distinct=len(counts),
        minimum=str(ordered[0])[:60] if ordered else None,
        maximum=str(ordered[-1])[:60] if ordered else None,
        top_values=top,
    )


class SourceCatalog:
    """Datasets profiled from files; satisfies ``CatalogView``."""

    def __init__(self, profiles: Sequence[DatasetProfile]) -> None:
        self._profiles = {profile.name: profile for profile in profiles}

    @classmethod
    def from_paths(cls, tables: Mapping[str, str | Path]) -> SourceCatalog:
        return cls([profile_source(name, path) for name, path in tables.items()])

    def find_datasets(self, query: str, limit: int = 8) -> Sequence[DatasetHit]:
        asked = words(query)
        hits = []
        for profile in self._profiles.values():
            names = words(profile.name) | {w for column in profile.columns for w in words(column.name)}
            values = {w for row in profile.samples for w in words(" ".join(str(v) for v in row.values()))}
            score = 2.0 * len(asked & names) + 0.5 * len(asked & values)
            hits.append(DatasetHit(profile.name, score, profile.summary))
        hits.sort(key=lambda hit: (-hit.score, hit.name))
        return hits[:limit]

    def describe(self, name: str) -> DatasetProfile:
        if name not in self._profiles:
            raise TableNotFoundError(name, self._profiles)
        return self._profiles[name]

    def search_segments(self, query: str, limit: int = 5) -> Sequence[SegmentHit]:
        return ()  # files named on the command line have no document segments


class ListMemory:
    """Memories in a list (saved to ``path`` as JSON when given); satisfies ``MemoryView``."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._records: list[MemoryRecord] = []
        if path is not None and path.is_file():
            self._records = [_record(item) for item in json.loads(path.read_text(encoding="utf-8"))]

    @property
    def records(self) -> tuple[MemoryRecord, ...]:
        return tuple(self._records)

    def recall(self, task: str, limit: int = 5, category: str | None = None) -> Sequence[MemoryRecord]:
        asked = words(task)
        scored = []
        for record in self._records:
            if category is not None and record.category != category:
                continue
            known = words(record.task)
            overlap = len(asked & known) / max(1, len(asked | known))
            scored.append((overlap, record))
        scored.sort(key=lambda item: (-item[0], item[1].created))
        found = [record for _, record in scored[:limit]]
        for record in found:
            self._replace(replace(record, hits=record.hits + 1))
        return found

    def remember(
        self, task: str, memory: str, category: str, expires: datetime | None = None, source_run: str | None = None
    ) -> MemoryRecord:
        record = MemoryRecord(uuid.uuid4().hex, task, memory, category, datetime.now(UTC), expires, 0, source_run)
        self._records.append(record)
        self._save()
        return record

    def forget(self, memory_id: str) -> None:
        self._records = [record for record in self._records if record.memory_id != memory_id]
        self._save()

    def expire(self, now: datetime | None = None) -> int:
        moment = now or datetime.now(UTC)
        kept = [record for record in self._records if record.expires is None or record.expires > moment]
        dropped = len(self._records) - len(kept)
        self._records = kept
        self._save()
        return dropped

    def _replace(self, record: MemoryRecord) -> None:
        self._records = [record if item.memory_id == record.memory_id else item for item in self._records]

    def _save(self) -> None:
        if self._path is None:
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        rows = [_row(record) for record in self._records]
        temporary = self._path.with_suffix(".tmp")
        temporary.write_text(json.dumps(rows, indent=1), encoding="utf-8")
        temporary.replace(self._path)


def _row(record: MemoryRecord) -> dict[str, Any]:
    return {
        "memory_id": record.memory_id,
        "task": record.task,
        "memory": record.memory,
        "category": record.category,
        "created": record.created.isoformat(),
        "expires": record.expires.isoformat() if record.expires else None,
        "hits": record.hits,
        "source_run": record.source_run,
    }


def _record(item: dict[str, Any]) -> MemoryRecord:
    expires = item.get("expires")
    return MemoryRecord(
        memory_id=str(item["memory_id"]),
        task=str(item["task"]),
        memory=str(item["memory"]),
        category=str(item["category"]),
        created=datetime.fromisoformat(item["created"]),
        expires=datetime.fromisoformat(expires) if expires else None,
        hits=int(item.get("hits", 0)),
        source_run=item.get("source_run"),
    )
