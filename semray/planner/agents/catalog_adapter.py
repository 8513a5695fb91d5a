"""The LanceDB catalog (``semray.catalog``) as the agents' ``CatalogView`` and ``MemoryView``.

``LanceCatalogView`` finds datasets and segments with ``catalog_search.search_catalog`` (hybrid
search, the query embedded with the profile's embedding tier) and describes a dataset from its
``datasets`` and ``columns`` rows, its Scan source from ``Catalog.scan``. ``StoreMemory`` maps
``MemoryStore`` (``remember`` takes a ttl and returns an id; ``recall`` takes categories) onto
``MemoryView``.

>>> view = LanceCatalogView(Catalog.open(settings), serving.embedding)  # doctest: +SKIP
>>> view.describe("reviews").schema().names  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from semray.catalog.catalog_search import search_catalog
from semray.catalog.memory import Memory, MemoryStore
from semray.catalog.store import Catalog
from semray.planner.agents.catalog_view import ColumnProfile, DatasetHit, DatasetProfile, MemoryRecord, SegmentHit
from semray.serving.config import TierConfig


class LanceCatalogView:
    """A ``CatalogView`` over one catalog version."""

    def __init__(self, catalog: Catalog, embedding: TierConfig) -> None:
        self._catalog = catalog
        self._embedding = embedding

    def find_datasets(self, query: str, limit: int = 8) -> Sequence[DatasetHit]:
        hits = search_catalog(self._catalog, query, self._embedding, k=limit)
        return [DatasetHit(hit.name, hit.score, hit.summary or "") for hit in hits.datasets]

    def search_segments(self, query: str, limit: int = 5) -> Sequence[SegmentHit]:
        hits = search_catalog(self._catalog, query, self._embedding, k=limit)
        return [SegmentHit(hit.dataset, hit.text, hit.score, tuple(hit.path)) for hit in hits.segments]

    def describe(self, name: str) -> DatasetProfile:
        record = self._catalog.dataset(name)
        source = self._catalog.scan(name)
        stats = {str(row["column"]): row for row in self._catalog.columns(name)}
        columns = tuple(_column(item, stats.get(str(item["name"]), {})) for item in record.schema)
        return DatasetProfile(
            name=record.name,
            kind=source.kind,
            uri=source.path or record.uri,
            columns=columns,
            options=tuple(sorted(source.options.items())),
            row_count=record.row_count,
            samples=record.samples,
            summary=record.summary or "",
        )


class StoreMemory:
    """A ``MemoryView`` over the catalog's ``MemoryStore``."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def recall(self, task: str, limit: int = 5, category: str | None = None) -> Sequence[MemoryRecord]:
        found = self._store.recall(task, limit, None if category is None else [category])
        return [_record(memory) for memory in found]

    def remember(
        self, task: str, memory: str, category: str, expires: datetime | None = None, source_run: str | None = None
    ) -> MemoryRecord:
        ttl = None if expires is None else expires - datetime.now(UTC)
        memory_id = self._store.remember(task, memory, category, source_run, ttl)
        return MemoryRecord(memory_id, task, memory, category, datetime.now(UTC), expires, 0, source_run)

    def forget(self, memory_id: str) -> None:
        self._store.forget(memory_id)

    def expire(self, now: datetime | None = None) -> int:
        return self._store.expire(now)


def _column(item: dict[str, Any], stats: dict[str, Any]) -> ColumnProfile:
    top = stats.get("top_values_json")
    values = tuple(str(pair[0]) for pair in json.loads(top)) if isinstance(top, str) and top else ()
    return ColumnProfile(
        name=str(item["name"]),
        type=str(item["type"]),
        nulls=stats.get("nulls"),
        distinct=stats.get("distinct_estimate"),
        minimum=stats.get("min"),
        maximum=stats.get("max"),
        top_values=values,
    )


def _record(memory: Memory) -> MemoryRecord:
    return MemoryRecord(
        memory.memory_id,
        memory.task,
        memory.memory,
        memory.category,
        memory.created,
        memory.expires,
        memory.hits,
        memory.source_run,
    )
