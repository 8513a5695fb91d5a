"""SemSearch over a gathered input: the k best rows, ranked by a run-scoped LanceDB index or by the catalog's.

A SemSearch whose input is the documents of a catalogued dataset (a Scan that ``read_catalog`` pinned,
``SourceSpec.catalog``, under filters and projections that keep each row's ``document_id`` and search
its ``text`` unchanged) lowers to a ``CatalogSearchStage`` (``lower_catalog_search``): no embed stage;
at run time the rows are ranked by the catalog's segments at the pinned version
(``semray.catalog.catalogued_rows``), so the query is the only text embedded and nothing is indexed.
Any other input keeps the run-scoped path: an ``EmbedStage`` embeds every row and a LanceDB table of
the run indexes them.

>>> query = read_catalog("notes").sem_search("text", "fever", k=5)  # doctest: +SKIP
>>> stage = lower_catalog_search(query.plan, settings)  # doctest: +SKIP
>>> search_rows(table, stage, tiers, run_dir / "indexes" / stage.operator_key)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from semray.catalog.catalogued_rows import (
    CatalogRoute,
    pinned_segments,
    search_catalogued_rows,
)
from semray.catalog.search_index import SearchIndex
from semray.cost_model.catalog_cost import catalogued_documents
from semray.errors import LoweringError
from semray.log import get_logger
from semray.operators.base import Node
from semray.operators.keys import operator_key
from semray.operators.relational import CatalogPin
from semray.operators.semantic import SemSearch
from semray.pipeline.set_join import vectors_of
from semray.pipeline.stages.set_ops import VECTOR, CatalogSearchStage, SearchStage
from semray.serving.deployments import TierHandles
from semray.serving.simulator.tokens import TokenCounter
from semray.settings import Settings
from semray.transactions import BatchLedger, LLMUsage, batch_key

log = get_logger(__name__)

QUERY_BATCH = "sem-search-query"
"""The batch id under which a search's query embedding is committed (no input row: it counts no rows)."""


@dataclass(frozen=True, slots=True)
class CatalogSearch:
    """The catalog's ``segments`` table and where the input's rows are in it."""

    segments: Any
    route: CatalogRoute


def catalog_route(node: SemSearch) -> tuple[CatalogPin, CatalogRoute] | None:
    """Where ``node``'s input rows are in the catalog, or None when it must build a run-scoped index.

    The input must reach a Scan pinned to a documents dataset through operators that only drop rows
    (``drops_rows_only``: filters, semantic filters, semi joins; and limits) and projections, with the searched
    column being the documents' ``text`` and some column holding their ``document_id``, both unchanged
    (``cost_model.catalog_cost.catalogued_documents``, which prices the same shape as one query embedding).
    """
    found = catalogued_documents(node)
    if found is None:
        return None
    pin, key_column = found
    return pin, CatalogRoute(dataset=pin.dataset, key_column=key_column)


def lower_catalog_search(node: Node, settings: Settings) -> CatalogSearchStage | None:
    """The catalog-ranked stage of a SemSearch over catalogued documents, or None to lower it as usual.

    ``lower_set_ops.lower_sem_search`` asks this first; None keeps the run-scoped index.
    """
    from semray.pipeline.lower import lower

    if not isinstance(node, SemSearch) or (found := catalog_route(node)) is None:
        return None
    pin, route = found
    log.debug("sem_search_routed_to_catalog", dataset=pin.dataset, version=pin.version, key=route.key_column)
    return CatalogSearchStage(
        column=node.column,
        query=node.query,
        k=node.k,
        mode=node.mode,
        output=node.output,
        operator_key=hashlib.sha256(f"{operator_key(node)}:catalog-search".encode()).hexdigest()[:24],
        index_root=settings.state_path / "indexes",
        input_columns=tuple((column.name, column.type) for column in node.input.output_schema.columns),
        pin=pin,
        route=route,
        catalog_path=settings.catalog_path,
        inputs=(lower(node.input, settings),),
    )


def search_rows(
    table: pa.Table,
    stage: SearchStage,
    tiers: TierHandles | None,
    folder: Path,
    catalog: CatalogSearch | None = None,
    ledger: BatchLedger | None = None,
) -> pa.Table:
    """The best ``stage.k`` rows of ``table``, best first, with their score in ``stage.output``.

    A ``CatalogSearchStage`` opens the catalog's segments at its pinned version (unless ``catalog`` is given).
    With the run's ``ledger`` the query's embedding is journaled (``embedded_query``).
    """
    columns = [name for name, _ in stage.input_columns if name != VECTOR]
    if catalog is None and isinstance(stage, CatalogSearchStage):
        catalog = CatalogSearch(pinned_segments(stage.catalog_path, stage.pin), stage.route)
    query_vector = embedded_query(stage, tiers, ledger)
    if catalog is not None:
        found = search_catalogued_rows(
            catalog.segments, table, catalog.route, stage.mode, stage.query, query_vector, stage.k
        )
    else:
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
        raise LoweringError(f"{stage.mode} search needs the embedding tier; run it through semray.pipeline.run")
    key = batch_key(stage.operator_key, [QUERY_BATCH])
    known = ledger.lookup(stage.operator_key, key) if ledger is not None else None
    if known is not None and known.num_rows:
        return np.asarray(known.column(VECTOR)[0].as_py(), dtype=np.float32)
    if ledger is not None:
        ledger.raise_if_fenced()  # a worker of an older attempt stops before paying
    vector = np.asarray(tiers.embed([stage.query])[0], dtype=np.float32)
    if ledger is not None:
        tokens = max(TokenCounter().count(stage.query), 1)
        usage = LLMUsage(calls=1, tokens_in=tokens, dollars=tiers.embedding_dollars(tokens))
        vectors = pa.table({VECTOR: pa.array([vector.tolist()], pa.list_(pa.float32()))})
        ledger.commit(stage.operator_key, key, (), vectors, usage, rows_out=0)
        log.debug("sem_search_query_embedded", operator=stage.operator_key, tokens=usage.tokens_in)
    return vector
