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
from sqlglot import exp

from semray.catalog.catalogued_rows import (
    DOCUMENT_KEY,
    DOCUMENT_TEXT,
    CatalogRoute,
    pinned_segments,
    search_catalogued_rows,
)
from semray.catalog.search_index import SearchIndex
from semray.errors import LoweringError
from semray.log import get_logger
from semray.operators.base import Node
from semray.operators.expressions import parse_expression
from semray.operators.relational import CatalogPin, Project, Scan
from semray.operators.schema import ROW_ID
from semray.operators.semantic import SemSearch
from semray.pipeline.lower_semantic import operator_key
from semray.pipeline.set_join import vectors_of
from semray.pipeline.set_spec import VECTOR, SearchStage
from semray.serving.deployments import TierHandles
from semray.settings import Settings

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class CatalogSearch:
    """The catalog's ``segments`` table and where the input's rows are in it."""

    segments: Any
    route: CatalogRoute


@dataclass(frozen=True, slots=True)
class CatalogSearchStage(SearchStage):
    """A SemSearch ranked by the catalog's segments of ``pin.dataset`` at ``pin.version``: its input is not embedded.

    ``route.key_column`` is the input column holding each row's ``document_id``; ``catalog_path`` is the
    catalog folder of the settings the plan was lowered with.
    """

    pin: CatalogPin
    route: CatalogRoute
    catalog_path: Path

    def describe(self) -> str:
        embedded = "nothing embedded" if self.mode == "fts" else "only the query embedded"
        return (
            f"Search[{self.mode}] {self.column} ~ {self.query!r} k={self.k} (the catalog's {self.route.level} "
            f"segments of {self.pin.dataset!r} at version {self.pin.version}, by {self.route.key_column}; {embedded})"
        )

    def model_tiers(self) -> frozenset[str]:
        """The tiers this stage calls: the embedding tier for the query of a vector or hybrid search."""
        return frozenset() if self.mode == "fts" else frozenset({"embedding"})


def catalog_route(node: SemSearch) -> tuple[CatalogPin, CatalogRoute] | None:
    """Where ``node``'s input rows are in the catalog, or None when it must build a run-scoped index.

    The input must reach a Scan pinned to a documents dataset through operators that only drop rows
    (``drops_rows_only``: filters, semantic filters, semi joins) and projections, with the searched
    column being the documents' ``text`` and some column holding their ``document_id``, both unchanged.
    """
    names = {name: name for name in node.input.output_schema.names if name != ROW_ID}
    current: Node = node.input
    while not isinstance(current, Scan):
        if isinstance(current, Project):
            below = {item.name: _bare_column(item.expr) for item in current.exprs}
            names = {name: source for name, at in names.items() if (source := below.get(at)) is not None}
        elif not current.drops_rows_only():
            return None
        current = current.children[0]
    pin = current.source.catalog
    if pin is None or not pin.documents or names.get(node.column) != DOCUMENT_TEXT:
        return None
    keys = [name for name, source in names.items() if source == DOCUMENT_KEY]
    if not keys:
        return None
    return pin, CatalogRoute(dataset=pin.dataset, key_column=keys[0])


def _bare_column(expression: str) -> str | None:
    """The column an expression is, unchanged (``text``, ``"text"``), or None for any computation."""
    tree = parse_expression(expression, "Project")
    return tree.name if isinstance(tree, exp.Column) and not tree.table else None


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
) -> pa.Table:
    """The best ``stage.k`` rows of ``table``, best first, with their score in ``stage.output``.

    A ``CatalogSearchStage`` opens the catalog's segments at its pinned version (unless ``catalog`` is given).
    """
    columns = [name for name, _ in stage.input_columns if name != VECTOR]
    if catalog is None and isinstance(stage, CatalogSearchStage):
        catalog = CatalogSearch(pinned_segments(stage.catalog_path, stage.pin), stage.route)
    query_vector = None
    if stage.mode != "fts":
        if tiers is None:
            raise LoweringError(f"{stage.mode} search needs the embedding tier; run it through semray.pipeline.run")
        query_vector = np.asarray(tiers.embed([stage.query])[0], dtype=np.float32)
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
