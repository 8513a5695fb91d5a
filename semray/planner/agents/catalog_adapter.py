"""The LanceDB catalog (``semray.catalog``) as the agents' ``CatalogView`` and ``MemoryView``.

``LanceCatalogView`` finds datasets and segments with ``catalog_search.search_catalog`` (hybrid
search, the query embedded with the profile's embedding tier) and describes a dataset from its
``datasets`` and ``columns`` rows, its Scan source from ``Catalog.pinned_scan``: the profile carries the
``CatalogPin`` of the catalog version the view reads, so the plans drafted from it are pinned there.
``StoreMemory`` maps ``MemoryStore`` (``remember`` takes a ttl and returns an id; ``recall`` takes
categories) onto ``MemoryView``: an expiry at or before the time of writing is already expired, so that memory is
not written (``expire`` would drop it and ``recall`` never return it). ``TierEmbedding`` is the
memory's embedding function: the profile's embedding tier (``SentenceEmbedder``), loaded on the
first call, so a task that never searches or writes memory never loads a model.

>>> view = LanceCatalogView(Catalog.open(settings), serving.embedding)  # doctest: +SKIP
>>> view.describe("reviews").schema().names  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from semray.catalog.catalog_search import search_catalog
from semray.catalog.memory import Memory, MemoryStore, memory_id_of
from semray.catalog.store import Catalog
from semray.errors import CatalogError
from semray.log import get_logger
from semray.planner.agents.catalog_view import ColumnProfile, DatasetHit, DatasetProfile, MemoryRecord, SegmentHit
from semray.serving.config import TierConfig

log = get_logger(__name__)


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
        source = self._catalog.pinned_scan(name)
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
            catalog=source.catalog,
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
        now = datetime.now(UTC)
        ttl = None if expires is None else expires - now
        if ttl is not None and ttl <= timedelta(0):
            # Expired on arrival: writing it would only give ``expire`` a row to drop.
            memory_id = memory_id_of(task, memory)
            log.info("memory_not_written_expired", memory_id=memory_id, category=category, expires=str(expires))
            return MemoryRecord(memory_id, task, memory, category, now, expires, 0, source_run)
        memory_id = self._store.remember(task, memory, category, source_run, ttl)
        return MemoryRecord(memory_id, task, memory, category, now, expires, 0, source_run)

    def forget(self, memory_id: str) -> None:
        self._store.forget(memory_id)

    def expire(self, now: datetime | None = None) -> int:
        return self._store.expire(now)


class TierEmbedding:
    """The embedding function of the catalog memory: the embedding tier's model, loaded on first use.

    >>> embed = TierEmbedding(serving.embedding)  # doctest: +SKIP
    >>> embed.loaded, embed(["count orders"]).shape, embed.loaded  # doctest: +SKIP
    (False, (1, 384), True)
    """

    def __init__(self, config: TierConfig) -> None:
        self._config = config
        self._embedder: Any = None

    @property
    def loaded(self) -> bool:
        return self._embedder is not None

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if self._embedder is None:
            if self._config.backend != "sentence_transformers":
                raise CatalogError(
                    "the catalog memory embeds tasks with a sentence_transformers embedding tier; the profile's is "
                    f'{self._config.backend!r}. Set [embedding] backend = "sentence_transformers" in the model '
                    "profile, or keep memory in a JSON file (semray ask --memory-file FILE)"
                )
            from semray.catalog.document_pipeline import local_embedder

            # One model per process: catalog search shares it.
            self._embedder = local_embedder(self._config).embedder
            log.info("memory_embedder_loaded", model=self._config.model)
        vectors: np.ndarray = self._embedder.embed(list(texts))
        return vectors


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
