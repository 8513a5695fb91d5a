"""SemSearch over a gathered input: index the column in a run-scoped LanceDB table, take the k best rows.

>>> search_rows(table, stage, tiers, run_dir / "indexes" / "op1")  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from semray.catalog.search_index import SearchIndex
from semray.errors import LoweringError
from semray.pipeline.set_join import vectors_of
from semray.pipeline.set_spec import VECTOR, SearchStage
from semray.serving.deployments import TierHandles


def search_rows(table: pa.Table, stage: SearchStage, tiers: TierHandles | None, folder: Path) -> pa.Table:
    """The best ``stage.k`` rows of ``table``, best first, with their score in ``stage.output``."""
    columns = [name for name, _ in stage.input_columns if name != VECTOR]
    uses_vectors = stage.mode != "fts"
    query_vector = None
    if uses_vectors:
        if tiers is None:
            raise LoweringError(f"{stage.mode} search needs the embedding tier; run it through semray.pipeline.run")
        query_vector = np.asarray(tiers.embed([stage.query])[0], dtype=np.float32)
    texts = [value if isinstance(value, str) else None for value in table.column(stage.column).to_pylist()]
    vectors = vectors_of(table) if uses_vectors else None
    index = SearchIndex.build(folder, texts, vectors, full_text=stage.mode != "vector")
    found = index.search(stage.mode, stage.query, query_vector, stage.k)
    positions = pa.array([position for position, _ in found], pa.int64())
    rows = table.select(columns).take(positions)
    return rows.append_column(stage.output, pa.array([score for _, score in found], pa.float64()))
