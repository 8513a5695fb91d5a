"""SemSearch over a gathered input: the k best rows, ranked by a run-scoped LanceDB index or by the catalog's.

Today every search indexes its column in a run-scoped LanceDB table. ``CatalogSearch`` is the seam
for a catalogued input: given the catalog's ``segments`` table (pinned at the version the plan
was made against) and the route of the input's rows into it, the rows are ranked by the
catalog's indexes (``semray.catalog.catalogued_rows``) and nothing is embedded or indexed here.

>>> search_rows(table, stage, tiers, run_dir / "indexes" / "op1")  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from semray.catalog.catalogued_rows import CatalogRoute, search_catalogued_rows
from semray.catalog.search_index import SearchIndex
from semray.errors import LoweringError
from semray.pipeline.set_join import vectors_of
from semray.pipeline.set_spec import VECTOR, SearchStage
from semray.serving.deployments import TierHandles


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
) -> pa.Table:
    """The best ``stage.k`` rows of ``table``, best first, with their score in ``stage.output``."""
    columns = [name for name, _ in stage.input_columns if name != VECTOR]
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
