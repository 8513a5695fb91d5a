"""SemSearch over a catalogued dataset: rank the input's rows by the catalog's segment indexes instead of a run index.

When SemSearch's input is (a subset of) the documents of a catalogued dataset, its rows need
not be embedded and indexed again: the catalog's ``segments`` already hold their vectors and
full-text index. Each input row names its document (``CatalogRoute.key_column``, the file's path
within the dataset, the segments' ``document_id``); the search is restricted, as a LanceDB
prefilter, to the dataset, the route's segment level and the documents of the input, so a
filtered input gets its exact top k. A document scores as its best segment (its first hit in
rank order); at the ``document`` level that is its one segment.

Full-text scores differ a little from a run-scoped index: BM25's term statistics are the whole
catalog's, not the input's. The query is embedded by the run's embedding tier, so it must be the
model the catalog was ingested with (a different dimension is refused; see ``search_catalogued_rows``).

A plan names the catalog version it reads (``SourceSpec.catalog``); ``pinned_segments`` opens the
``segments`` table at that version and checks the dataset is the one the plan was made against.

>>> route = CatalogRoute(dataset="notes", key_column="path")
>>> search_catalogued_rows(segments, rows, route, "hybrid", "chest pain", vector, k=5)  # doctest: +SKIP
[(12, 0.0327), (3, 0.0322), ...]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from semray.catalog.retrieval import SearchMode, rank_rows
from semray.catalog.segment_filter import in_list, segment_filter
from semray.catalog.store import MANIFESTS, Catalog, read_manifest
from semray.catalog.tables import SEGMENT_LEVELS, SEGMENTS
from semray.errors import CatalogError, SearchError
from semray.log import get_logger
from semray.operators.relational import CatalogPin

log = get_logger(__name__)

MAX_SEGMENTS_FETCHED = 10_000
"""The most segment hits one search reads while collecting k distinct documents."""


@dataclass(frozen=True, slots=True)
class CatalogRoute:
    """Where a SemSearch input lives in the catalog: its dataset, the column naming each row's document, the level."""

    dataset: str
    key_column: str
    level: str = "document"

    def __post_init__(self) -> None:
        if self.level not in SEGMENT_LEVELS:
            raise SearchError(f"catalog route level {self.level!r} is not one of {', '.join(SEGMENT_LEVELS)}")


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
    if not positions or k < 1:
        return []
    scope = segment_filter(datasets=[route.dataset], levels=[route.level])
    where = f"{scope} AND ({in_list('document_id', list(positions))})"
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
            best.setdefault(hit.row["document_id"], hit.score)
        exhausted = len(hits) < fetch or fetch >= MAX_SEGMENTS_FETCHED
        if len(best) >= k or exhausted:
            break
        fetch = min(MAX_SEGMENTS_FETCHED, fetch * 4)
    log.info("catalog_search_rows", dataset=route.dataset, level=route.level, rows=len(positions), hits=len(hits))
    return [(positions[document], score) for document, score in list(best.items())[:k]]


def pinned_segments(catalog_path: Path, pin: CatalogPin) -> Any:
    """The catalog's ``segments`` table at ``pin.version``, after checking it holds ``pin.dataset`` as planned.

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
