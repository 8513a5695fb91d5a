"""``semray catalog search``: the segments and the datasets that best match a query.

Segments through ``catalog.search.search_segments`` (hybrid: vector + full text, fused by
reciprocal rank); datasets the same way over their ``profile_text`` and profile vectors
(``retrieval.rank_rows``). The query is embedded in this process with the embedding tier.

>>> found = search_catalog(Catalog.open(settings), "fraud schemes", embedding, k=5)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from semray.catalog.document_pipeline import local_embedder
from semray.catalog.retrieval import SearchMode, full_text_index, rank_rows
from semray.catalog.search import SegmentHit, search_segments
from semray.catalog.store import Catalog
from semray.catalog.tables import DATASETS, SEGMENTS
from semray.serving.config import TierConfig


@dataclass(frozen=True, slots=True)
class DatasetHit:
    """A dataset whose profile matches the query."""

    name: str
    kind: str
    summary: str | None
    score: float


@dataclass(frozen=True, slots=True)
class CatalogHits:
    datasets: tuple[DatasetHit, ...]
    segments: tuple[SegmentHit, ...]


def search_catalog(
    catalog: Catalog, query: str, embedding: TierConfig, *, k: int = 10, mode: SearchMode = "hybrid"
) -> CatalogHits:
    """The ``k`` best datasets and the ``k`` best segments for ``query``."""
    vector = local_embedder(embedding).embed([query])[0] if mode != "fts" else None
    datasets: list[DatasetHit] = []
    table = catalog.table(DATASETS)
    if table is not None:
        found = rank_rows(
            table,
            mode=mode,
            query=query,
            query_vector=vector,
            k=k,
            key="name",
            columns=("name", "kind", "summary"),
            text_column="profile_text",
        )
        datasets = [DatasetHit(hit.row["name"], hit.row["kind"], hit.row["summary"], hit.score) for hit in found]
    segments: list[SegmentHit] = []
    segment_table = catalog.table(SEGMENTS)
    if segment_table is not None and segment_table.count_rows():
        segments = search_segments(segment_table, query, vector, k=k, mode=mode)
    return CatalogHits(tuple(datasets), tuple(segments))


def index_datasets(table: Any) -> None:
    """The full-text index dataset search needs (rebuilt after every publish of ``datasets``)."""
    table.create_index("profile_text", config=full_text_index(), replace=True)
