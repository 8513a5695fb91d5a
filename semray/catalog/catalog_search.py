"""``semray catalog search``: the segments and the datasets that best match a query.

Segments through ``catalog.search`` (hybrid: vector + full text, fused by reciprocal rank), each
with its level, path of headings and source span; datasets the same way over their
``profile_text`` and profile vectors (``retrieval.rank_rows``). The query is embedded in this
process with the embedding tier.

Which segments: ``level`` None (the default, for the CLI and the planning agents) ranks every level
and keeps each hit at the level that fits it best (``search_best_fitting``: a segment overlapping a
better hit of its document, its ancestor or descendant, is dropped), so one answer is not repeated as
its paragraph, section and document; a level (``"paragraph"``) searches that level only.
``datasets`` restricts both lists to some datasets, ``where`` is a filter on segment columns
(``segment_filter``: ``"topic = 'Cardiology'"``, ``"ordinal < 3"``).

>>> found = search_catalog(Catalog.open(settings), "fraud schemes", embedding, k=5)  # doctest: +SKIP
>>> found.segments[0].level, found.segments[0].path, (found.segments[0].start, found.segments[0].end)  # doctest: +SKIP
('paragraph', ('memo.md', 'Findings'), (812, 1190))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from semray.catalog.document_pipeline import local_embedder
from semray.catalog.retrieval import SearchMode, full_text_index, rank_rows
from semray.catalog.search import SegmentHit, search_best_fitting, search_segments
from semray.catalog.segment_filter import in_list
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
    catalog: Catalog,
    query: str,
    embedding: TierConfig,
    *,
    k: int = 10,
    mode: SearchMode = "hybrid",
    level: str | None = None,
    datasets: Sequence[str] | None = None,
    where: str | None = None,
) -> CatalogHits:
    """The ``k`` best datasets and the ``k`` best segments for ``query`` (module doc: which segments)."""
    vector = local_embedder(embedding).embed([query])[0] if mode != "fts" else None
    found_datasets: list[DatasetHit] = []
    table = catalog.table(DATASETS)
    if table is not None and (datasets is None or list(datasets)):
        found = rank_rows(
            table,
            mode=mode,
            query=query,
            query_vector=vector,
            k=k,
            key="name",
            columns=("name", "kind", "summary"),
            where=None if datasets is None else in_list("name", list(datasets)),
            text_column="profile_text",
        )
        found_datasets = [DatasetHit(hit.row["name"], hit.row["kind"], hit.row["summary"], hit.score) for hit in found]
    segments: list[SegmentHit] = []
    segment_table = catalog.table(SEGMENTS)
    if segment_table is not None and segment_table.count_rows():
        if level is None:
            segments = search_best_fitting(segment_table, query, vector, k=k, mode=mode, where=where, datasets=datasets)
        else:
            segments = search_segments(
                segment_table, query, vector, k=k, mode=mode, where=where, datasets=datasets, levels=[level]
            )
    return CatalogHits(tuple(found_datasets), tuple(segments))


def index_datasets(table: Any) -> None:
    """The full-text index dataset search needs (rebuilt after every publish of ``datasets``)."""
    table.create_index("profile_text", config=full_text_index(), replace=True)
