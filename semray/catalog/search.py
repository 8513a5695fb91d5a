"""Search the catalog's ``segments`` table: its indexes, and vector, full-text or hybrid search with filters.

``create_segment_indexes`` builds, on a ``segments`` table (``tables.segments_schema``):

- LanceDB's native full-text index on ``text`` (``retrieval.full_text_index``: ICU words,
  so Chinese or Japanese text is searchable too);
- scalar indexes for the filters: a B-tree on ``dataset`` and ``document_id``, a bitmap on
  ``level`` (four values);
- from ``ANN_MIN_ROWS`` rows on, an HNSW index with scalar quantization (``HnswSq``, cosine) on
  ``vector``, one graph per ``ROWS_PER_HNSW_PARTITION`` rows (up to ``MAX_HNSW_PARTITIONS``); below
  that, vector search is exact, which is fast at that size and needs no training.

``search_segments`` ranks through ``retrieval.rank_rows`` (scores: cosine similarity, BM25, or
reciprocal rank fusion ``sum 1 / (60 + rank)`` of the two lists for hybrid) with the filter of
``segment_filter`` pushed into LanceDB as a prefilter; each hit keeps its level, path and source
span. ``search_best_fitting`` ranks every level and keeps each hit at the level that fits it best
(no hit overlapping a better one of its document).

>>> create_segment_indexes(table)  # doctest: +SKIP
>>> search_segments(table, "chest pain", vector, k=5, datasets=["notes"], levels=["chunk"])[0]  # doctest: +SKIP
SegmentHit(segment_id='3f..', dataset='notes', document_id='a.md', level='chunk', path=('Intro',), ...)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from semray.catalog.retrieval import ANN_MIN_ROWS, RankedRow, SearchMode, full_text_index, rank_rows
from semray.catalog.segment_filter import segment_filter
from semray.errors import SearchError
from semray.log import get_logger

log = get_logger(__name__)

ROWS_PER_HNSW_PARTITION = 10_000
"""One HNSW graph per this many rows (IVF partitions), up to ``MAX_HNSW_PARTITIONS`` graphs. Small graphs
build faster and hold less. Measured with a scratch probe on clustered 384-d vectors, 2 shared cores
(RSS growth of the build, build seconds, recall of the exact top 10 at ``retrieval.ANN_EF`` 150):
one graph +302 MiB / 25.5 s / 0.76 at 60k rows, +500 MiB / 129 s / 0.56 at 120k; graphs of 10k rows
+321 MiB / 8.7 s / 0.93 at 60k, +413 MiB / 93 s / 0.94 at 120k, +503 MiB / 0.88 at 240k (20 graphs).
What still grows with the rows is LanceDB's IVF shuffle and index writer, not the graphs: an
``IvfSq`` index (no graph) grew +314 / +501 MiB at 60k / 240k; ``LANCE_SHUFFLE_BATCH_BYTES`` at 16 MiB
changed nothing (+385 / +532 MiB)."""
MAX_HNSW_PARTITIONS = 20
"""The most graphs: LanceDB's vector search probes 20 partitions by default, so every graph is searched
(at 240k rows, 24 graphs of which 20 probed recalled 0.85, against 0.88 for 20 graphs)."""
HNSW_EF_CONSTRUCTION = 120
"""Candidates kept while linking each vector into the graph (LanceDB's default is 300). On 60k clustered
384-d vectors, 2 cores: 120 builds 2.4x faster (14.9 s vs 36.3 s) and, searched with ``retrieval.ANN_EF``
= 150, recalls 0.98 of the exact top 10 (300 with LanceDB's default search: 0.976). The build is most of
an ingest's time past ``ANN_MIN_ROWS`` segments that is not the model's."""
MAX_BEST_FIT_FETCH = 10_000
"""The most ranked segments ``search_best_fitting`` reads while collecting k that do not overlap."""
HIT_COLUMNS = ("segment_id", "dataset", "document_id", "level", "path", "start", "end", "text")


@dataclass(frozen=True, slots=True)
class SegmentHit:
    """One segment found, its score (see the module doc) and its 1-based rank in each list searched."""

    segment_id: str
    dataset: str
    document_id: str
    level: str
    path: tuple[str, ...]
    start: int
    """The segment's character span in its document's text: ``text == document_text[start:end]``."""
    end: int
    text: str
    score: float
    vector_rank: int | None
    fts_rank: int | None

    def overlaps(self, other: SegmentHit) -> bool:
        """Whether both are of one document and their spans share a character (one holds the other)."""
        return (
            self.dataset == other.dataset
            and self.document_id == other.document_id
            and self.start < other.end
            and other.start < self.end
        )


def create_segment_indexes(table: Any, *, ann_min_rows: int = ANN_MIN_ROWS) -> None:
    """Build (or rebuild) the full-text, scalar and, past ``ann_min_rows`` rows, vector indexes of ``table``.

    Every index is rebuilt over the whole table (in the catalog, a shard: ``shards.py``), not updated with the
    rows a publish added: LanceDB 0.40 updates an index only through ``Table.optimize()``, which on an
    ``HnswSq`` index merged it and cut the recall@10 of random vectors from 0.945 to 0.22, was slower overall
    and raised the peak (``benchmarks/vector_index_growth.py``; docs/catalog_search.md).
    """
    from lancedb.index import Bitmap, BTree, HnswSq

    _require_segments(table)
    started = time.perf_counter()
    rows = int(table.count_rows())
    table.create_index("text", config=full_text_index(), replace=True)
    table.create_index("dataset", config=BTree(), replace=True)
    table.create_index("document_id", config=BTree(), replace=True)
    table.create_index("level", config=Bitmap(), replace=True)
    ann = rows >= ann_min_rows
    if ann:
        partitions = min(MAX_HNSW_PARTITIONS, -(-rows // ROWS_PER_HNSW_PARTITION))
        graph = HnswSq(distance_type="cosine", num_partitions=partitions, ef_construction=HNSW_EF_CONSTRUCTION)
        table.create_index("vector", config=graph, replace=True)
    log.info("segment_indexes_built", rows=rows, ann=ann, seconds=round(time.perf_counter() - started, 3))


def search_segments(
    table: Any,
    query: str,
    query_vector: npt.NDArray[np.float32] | None,
    *,
    k: int,
    mode: SearchMode = "hybrid",
    where: str | None = None,
    datasets: Sequence[str] | None = None,
    levels: Sequence[str] | None = None,
) -> list[SegmentHit]:
    """The ``k`` best segments for ``query`` (and ``query_vector``, for vector and hybrid), best first.

    ``datasets`` / ``levels`` restrict the search (an empty list matches nothing); ``where`` is a
    further SQL filter over the segments' scalar columns, checked by ``segment_filter``. Fewer
    than ``k`` hits come back when fewer rows match (or, by full text, fewer contain a term).
    """
    _require_segments(table)
    if (datasets is not None and not list(datasets)) or (levels is not None and not list(levels)):
        return []
    pushed = segment_filter(datasets=datasets, levels=levels, where=where)
    found = rank_rows(
        table,
        mode=mode,
        query=query,
        query_vector=query_vector,
        k=k,
        key="segment_id",
        columns=HIT_COLUMNS,
        where=pushed,
    )
    return [segment_hit(hit) for hit in found]


def segment_hit(hit: RankedRow) -> SegmentHit:
    """The ``SegmentHit`` of a ranked row of ``segments`` (ranked with ``columns=HIT_COLUMNS``)."""
    return SegmentHit(
        segment_id=hit.row["segment_id"],
        dataset=hit.row["dataset"],
        document_id=hit.row["document_id"],
        level=hit.row["level"],
        path=tuple(hit.row["path"] or ()),
        start=int(hit.row["start"]),
        end=int(hit.row["end"]),
        text=hit.row["text"],
        score=hit.score,
        vector_rank=hit.vector_rank,
        fts_rank=hit.fts_rank,
    )


def search_best_fitting(
    table: Any,
    query: str,
    query_vector: npt.NDArray[np.float32] | None,
    *,
    k: int,
    mode: SearchMode = "hybrid",
    where: str | None = None,
    datasets: Sequence[str] | None = None,
) -> list[SegmentHit]:
    """The ``k`` best segments of any level that do not overlap a better one: each hit at the level that fits best.

    Segments of every level are ranked together; walking them best first, a segment whose span overlaps
    one already kept in the same document (its ancestor or its descendant) is dropped. So a query
    answered by one paragraph gets that paragraph, not also its section and document, and a query the
    whole document answers best gets the document. Fewer than ``k`` come back when fewer segments match.
    """
    fetch = max(4 * k, k + 8)
    while True:
        ranked = search_segments(table, query, query_vector, k=fetch, mode=mode, where=where, datasets=datasets)
        kept: list[SegmentHit] = []
        for hit in ranked:
            if not any(hit.overlaps(better) for better in kept):
                kept.append(hit)
            if len(kept) == k:
                return kept
        if len(ranked) < fetch or fetch >= MAX_BEST_FIT_FETCH:
            return kept
        fetch = min(MAX_BEST_FIT_FETCH, fetch * 4)


def _require_segments(table: Any) -> None:
    names = set(table.schema.names)
    missing = [name for name in (*HIT_COLUMNS, "vector") if name not in names]
    if missing:
        raise SearchError(
            f"table {getattr(table, 'name', '?')!r} is not a segments table (no {', '.join(missing)}); "
            "open the catalog's 'segments' table"
        )
