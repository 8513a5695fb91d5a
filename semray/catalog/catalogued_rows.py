"""SemSearch over a catalogued dataset: rank by the catalog's segment indexes instead of a run index.

When SemSearch's input is (a subset of) the documents of a catalogued dataset, its rows need
not be embedded and indexed again: the catalog's ``segments`` already hold their vectors and
full-text index. Each input row names its document (``CatalogRoute.key_column``, the file's path
within the dataset, the segments' ``document_id``); the search is restricted, as a LanceDB
prefilter, to the dataset, the route's segment level and the documents of the input (no list of
documents when the input holds them all), so a filtered input gets its exact top k. Two shapes
(``catalogued_table``):

- rows (``SemSearch.level`` None): the input's rows, each document scored as its best segment at
  the route's level (its first hit in rank order; at the ``document`` level, its one segment);
- segment hits (``SemSearch.level`` set, ``CatalogRoute.segment_hits``): the k best segments of
  that level, one output row each: its document's input row, the score, and the segment's id, path,
  span and text (``SEGMENT_HIT_COLUMNS``), ``_rowid`` suffixed ``#<segment_id>`` so it stays unique.

Full-text scores differ a little from a run-scoped index: BM25's term statistics are those of the
catalog's shard holding the segment (``shards.py``), not the input's. The query is embedded by the
run's embedding tier, so it must be the model the catalog was ingested with (a different dimension
is refused; see ``search_catalogued_rows``).

A plan names the catalog version it reads (``SourceSpec.catalog``); ``pinned_segments`` opens the
``segments`` shards at that version and checks the dataset is the one the plan was made against.

>>> route = CatalogRoute(dataset="notes", key_column="path")
>>> search_catalogued_rows(segments, rows, route, "hybrid", "chest pain", vector, k=5)  # doctest: +SKIP
[(12, 0.0327), (3, 0.0322), ...]
>>> CatalogRoute("notes", "document_id", "paragraph", segment_hits=True).describe(version=3)
"the catalog's paragraph segments of 'notes' at version 3, one row per segment hit"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from semray.catalog.retrieval import SearchMode, rank_rows
from semray.catalog.search import HIT_COLUMNS, SegmentHit, segment_hit
from semray.catalog.segment_filter import in_list, segment_filter
from semray.catalog.store import MANIFESTS, Catalog, read_manifest
from semray.catalog.tables import SEGMENT_LEVELS, SEGMENTS
from semray.errors import CatalogError, SearchError
from semray.log import get_logger
from semray.operators.catalogued import SEGMENT_HIT_COLUMNS, catalogued_documents
from semray.operators.relational import CatalogPin
from semray.operators.schema import ROW_ID
from semray.operators.semantic import SemSearch

log = get_logger(__name__)

MAX_SEGMENTS_FETCHED = 10_000
"""The most segment hits one search reads while collecting k distinct documents."""


@dataclass(frozen=True, slots=True)
class CatalogRoute:
    """Where a SemSearch input lives in the catalog: its dataset, the column naming each row's document, the level.

    ``segment_hits``: one output row per segment of ``level`` found (``SemSearch.level``); otherwise
    the input's rows, each scored as its best segment of ``level``.
    """

    dataset: str
    key_column: str
    level: str = "document"
    segment_hits: bool = False

    def __post_init__(self) -> None:
        if self.level not in SEGMENT_LEVELS:
            raise SearchError(f"catalog route level {self.level!r} is not one of {', '.join(SEGMENT_LEVELS)}")

    def describe(self, version: int | None = None) -> str:
        """Where the search looks, for EXPLAIN: ``the catalog's paragraph segments of 'notes' at version 3, ...``."""
        at = f" at version {version}" if version is not None else ""
        shape = ", one row per segment hit" if self.segment_hits else ""
        return f"the catalog's {self.level} segments of {self.dataset!r}{at}{shape}"


def catalog_route(node: SemSearch) -> tuple[CatalogPin, CatalogRoute] | None:
    """Where ``node``'s input rows are in the catalog, or None when it must build a run-scoped index.

    The shape is ``operators.catalogued.catalogued_documents`` (the cost model prices the same one);
    ``node.level`` None ranks the rows at the ``document`` level, a level gives segment hits.
    """
    found = catalogued_documents(node)
    if found is None:
        return None
    pin, key_column = found
    route = CatalogRoute(
        dataset=pin.dataset,
        key_column=key_column,
        level=node.level or "document",
        segment_hits=node.level is not None,
    )
    return pin, route


def catalogued_table(
    segments: Any,
    rows: pa.Table,
    route: CatalogRoute,
    mode: SearchMode,
    query: str,
    query_vector: npt.NDArray[np.float32] | None,
    k: int,
    columns: Sequence[str],
    output: str,
) -> pa.Table:
    """The search's output, best first: ``columns`` of ``rows``, the score in ``output`` (module doc: two shapes)."""
    if not route.segment_hits:
        found = search_catalogued_rows(segments, rows, route, mode, query, query_vector, k)
        taken = rows.select(list(columns)).take(pa.array([position for position, _ in found], pa.int64()))
        return taken.append_column(output, pa.array([score for _, score in found], pa.float64()))
    hits = search_catalogued_segments(segments, rows, route, mode, query, query_vector, k)
    taken = rows.select(list(columns)).take(pa.array([position for position, _ in hits], pa.int64()))
    if ROW_ID in taken.column_names:
        suffixed = [
            f"{row_id}#{hit.segment_id}"
            for row_id, (_, hit) in zip(taken.column(ROW_ID).to_pylist(), hits, strict=True)
        ]
        taken = taken.set_column(taken.column_names.index(ROW_ID), ROW_ID, pa.array(suffixed, pa.string()))
    values: dict[str, pa.Array] = {
        output: pa.array([hit.score for _, hit in hits], pa.float64()),
        "segment_id": pa.array([hit.segment_id for _, hit in hits], pa.string()),
        "segment_path": pa.array([list(hit.path) for _, hit in hits], pa.list_(pa.string())),
        "segment_start": pa.array([hit.start for _, hit in hits], pa.int64()),
        "segment_end": pa.array([hit.end for _, hit in hits], pa.int64()),
        "segment_text": pa.array([hit.text for _, hit in hits], pa.string()),
    }
    for name in (output, *(name for name, _ in SEGMENT_HIT_COLUMNS)):
        taken = taken.append_column(name, values[name])
    return taken


def search_catalogued_rows(
    segments: Any,
    rows: pa.Table,
    route: CatalogRoute,
    mode: SearchMode,
    query: str,
    query_vector: npt.NDArray[np.float32] | None,
    k: int,
) -> list[tuple[int, float]]:
    """(position in ``rows``, score) of the best ``k`` rows by the catalog's ``segments``, best first."""
    positions = _document_positions(segments, rows, route, query_vector)
    if not positions or k < 1:
        return []
    where = _scope(segments, route, positions)
    fetch = k
    while True:
        hits = rank_rows(
            segments,
            mode=mode,
            query=query,
            query_vector=query_vector,
            k=fetch,
            key="segment_id",
            columns=("document_id",),
            where=where,
        )
        best: dict[str, float] = {}
        for hit in hits:
            if hit.row["document_id"] in positions:
                best.setdefault(hit.row["document_id"], hit.score)
        exhausted = len(hits) < fetch or fetch >= MAX_SEGMENTS_FETCHED
        if len(best) >= k or exhausted:
            break
        fetch = min(MAX_SEGMENTS_FETCHED, fetch * 4)
    log.info("catalog_search_rows", dataset=route.dataset, level=route.level, rows=len(positions), hits=len(hits))
    return [(positions[document], score) for document, score in list(best.items())[:k]]


def search_catalogued_segments(
    segments: Any,
    rows: pa.Table,
    route: CatalogRoute,
    mode: SearchMode,
    query: str,
    query_vector: npt.NDArray[np.float32] | None,
    k: int,
) -> list[tuple[int, SegmentHit]]:
    """(position of its document's row in ``rows``, hit) of the ``k`` best segments of ``route.level``, best first."""
    positions = _document_positions(segments, rows, route, query_vector)
    if not positions or k < 1:
        return []
    found = rank_rows(
        segments,
        mode=mode,
        query=query,
        query_vector=query_vector,
        k=k,
        key="segment_id",
        columns=HIT_COLUMNS,
        where=_scope(segments, route, positions),
    )
    hits = [segment_hit(hit) for hit in found]
    log.info("catalog_search_segments", dataset=route.dataset, level=route.level, rows=len(positions), hits=len(hits))
    return [(positions[hit.document_id], hit) for hit in hits if hit.document_id in positions]


def _document_positions(
    segments: Any, rows: pa.Table, route: CatalogRoute, query_vector: npt.NDArray[np.float32] | None
) -> dict[str, int]:
    """Each document named in ``rows`` (``route.key_column``) -> its first row's position, after checking the input."""
    if route.key_column not in rows.column_names:
        raise SearchError(f"catalog route: the input has no column {route.key_column!r} naming its documents")
    if query_vector is not None:
        dimension = segments.schema.field("vector").type.list_size
        if len(query_vector) != dimension:
            raise SearchError(
                f"the run's embedding tier gives {len(query_vector)}-dimensional vectors, but the catalog's segments "
                f"of {route.dataset!r} have {dimension}: run with the model profile the catalog was ingested with "
                '(--models FILE), or search by full text (mode="fts")'
            )
    positions: dict[str, int] = {}
    for position, document in enumerate(rows.column(route.key_column).to_pylist()):
        if isinstance(document, str):
            positions.setdefault(document, position)
    return positions


def _scope(segments: Any, route: CatalogRoute, positions: dict[str, int]) -> str:
    """The prefilter: the route's dataset and level, and the input's documents unless it holds all of them.

    The list is left out when the input has as many documents as the dataset (its rows come from
    the pinned dataset, so they are all of them): a search over a whole collection does not hand
    LanceDB an IN list of every document id. Hits are still checked against ``positions``.
    """
    scope = segment_filter(datasets=[route.dataset], levels=[route.level])
    documents = segment_filter(datasets=[route.dataset], levels=["document"])
    if len(positions) >= int(segments.count_rows(documents)):
        return f"{scope}"
    return f"{scope} AND ({in_list('document_id', list(positions))})"


def pinned_segments(catalog_path: Path, pin: CatalogPin) -> Any:
    """The catalog's ``segments`` at ``pin.version`` (a ``shards.Shards``), after checking it holds ``pin.dataset``
    as planned.

    Raises ``CatalogError`` naming what is wrong: no catalog at ``catalog_path``, no such version, no such
    dataset at it, or a dataset whose content is not the one the plan was made against (the catalog folder
    was rebuilt since).
    """
    if not (catalog_path / MANIFESTS).is_dir():
        raise CatalogError(
            f"the plan reads catalogued dataset {pin.dataset!r} at catalog version {pin.version}, but there is no "
            f"catalog at {catalog_path}; run it with the state folder (SEMRAY_STATE_DIR) it was planned against"
        )
    catalog = Catalog(catalog_path, read_manifest(catalog_path, pin.version), pinned=True)
    record = catalog.dataset(pin.dataset)
    if record.content_hash != pin.content_hash:
        raise CatalogError(
            f"dataset {pin.dataset!r} at catalog version {pin.version} has content {record.content_hash[:12]}, "
            f"not the {pin.content_hash[:12]} the plan was made against (the catalog at {catalog_path} was rebuilt); "
            "build the plan again with semray.read_catalog"
        )
    segments = catalog.table(SEGMENTS) if record.kind == "documents" else None
    if segments is None:
        raise CatalogError(
            f"dataset {pin.dataset!r} at catalog version {pin.version} has no segments (it is a {record.kind} "
            "dataset); only a documents dataset's rows can be searched by the catalog's indexes"
        )
    return segments
