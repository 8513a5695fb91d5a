"""SemSearch over a gathered input: the k best rows, ranked by a run-scoped LanceDB index or by the catalog's.

A SemSearch whose input is the documents of a catalogued dataset (a Scan that ``read_catalog`` pinned,
``SourceSpec.catalog``, under filters and projections that keep each row's ``document_id`` and search
its ``text`` unchanged) lowers to a ``CatalogSearchStage`` (``pipeline/lowering/set_ops.catalog_route``):
no embed stage; at run time the rows are ranked by the catalog's segments at the pinned version
(``semray.catalog.catalogued_rows``), so the query is the only text embedded and nothing is indexed.
Any other input keeps the run-scoped path: an ``EmbedStage`` embeds every row and a LanceDB table of
the run indexes them.

>>> query = read_catalog("notes").sem_search("text", "fever", k=5)  # doctest: +SKIP
>>> stage = lower(query.plan, settings)  # a CatalogSearchStage  # doctest: +SKIP
>>> search_rows(table, stage, tiers, run_dir / "indexes" / stage.operator_key)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from semray.catalog.catalogued_rows import (
    CatalogRoute,
    catalogued_table,
    pinned_segments,
)
from semray.catalog.search_index import SearchIndex
from semray.errors import LoweringError
from semray.log import get_logger
from semray.pipeline.stages.set_ops import VECTOR, CatalogSearchStage, SearchStage
from semray.pipeline.workers.blocking import vectors_of
from semray.pipeline.workers.embed_batches import journaled_embedding
from semray.serving.deployments import TierHandles
from semray.transactions import BatchLedger

log = get_logger(__name__)

QUERY_BATCH = "sem-search-query"
"""The batch id under which a search's query embedding is committed (no input row: it counts no rows)."""


@dataclass(frozen=True, slots=True)
class CatalogSearch:
    """The catalog's ``segments`` table and where the input's rows are in it."""

    segments: Any
    route: CatalogRoute


def search_rows(
    table: pa.Table,
    stage: SearchStage,
    tiers: TierHandles | None,
    folder: Path,
    catalog: CatalogSearch | None = None,
    ledger: BatchLedger | None = None,
) -> pa.Table:
    """The best ``stage.k`` rows of ``table``, best first, with their score in ``stage.output``.

    A ``CatalogSearchStage`` opens the catalog's segments at its pinned version (unless ``catalog`` is given);
    when its route asks for segment hits (``SemSearch.level``) each output row is one segment of that level,
    its document's row followed by the score and the segment's id, path, span and text
    (``catalogued_rows.catalogued_table``).
    With the run's ``ledger`` the query's embedding is journaled (``embedded_query``).
    """
    columns = [name for name, _ in stage.input_columns if name != VECTOR]
    if catalog is None and isinstance(stage, CatalogSearchStage):
        catalog = CatalogSearch(pinned_segments(stage.catalog_path, stage.pin), stage.route)
    query_vector = embedded_query(stage, tiers, ledger)
    if catalog is not None:
        segments, route, output = catalog.segments, catalog.route, stage.output
        return catalogued_table(segments, table, route, stage.mode, stage.query, query_vector, stage.k, columns, output)
    texts = [value if isinstance(value, str) else None for value in table.column(stage.column).to_pylist()]
    vectors = vectors_of(table) if stage.mode != "fts" else None
    index = SearchIndex.build(folder, texts, vectors, full_text=stage.mode != "vector")
    found = index.search(stage.mode, stage.query, query_vector, stage.k)
    positions = pa.array([position for position, _ in found], pa.int64())
    rows = table.select(columns).take(positions)
    return rows.append_column(stage.output, pa.array([score for _, score in found], pa.float64()))


def embedded_query(stage: SearchStage, tiers: TierHandles | None, ledger: BatchLedger | None) -> np.ndarray | None:
    """The query's vector (None for a full-text search), embedded once per run and counted in its usage.

    The embedding call is committed to the run's ledger under the stage's operator key (one call, the
    query's tokens, priced by ``TierHandles.embedding_dollars``) with the vector, so ``Result.usage``
    counts it and a resume reads the vector back instead of paying again. Without a ledger it is
    embedded, uncounted.
    """
    if stage.mode == "fts":
        return None
    if tiers is None:
        raise LoweringError(
            f"{stage.mode} search needs the embedding tier; run it through semray.pipeline.runs.execute"
        )
    vector = journaled_embedding(stage.query, stage.operator_key, QUERY_BATCH, tiers, ledger)
    log.debug("sem_search_query_embedded", operator=stage.operator_key, journaled=ledger is not None)
    return vector
