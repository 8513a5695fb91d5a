"""A run-scoped LanceDB index over one text column: vector, full-text (native FTS) and hybrid search.

Rows are identified by their position in the indexed table (``_pos``), so a search returns
positions and scores and the caller takes its own rows. Vectors are cosine-compared unit
vectors; below ``ANN_MIN_ROWS`` rows the search is exact (no vector index to train), above it an
``HnswSq`` index answers. The full-text index is LanceDB's native one (``lancedb.index.FTS``, the
tokenizer of ``retrieval.full_text_index``). Searching, and the fusion of hybrid search, is
``semray.catalog.retrieval``'s, shared with the catalog's segment search.

>>> index = SearchIndex.build(folder, ["red apple", "blue sky"], vectors, full_text=True)  # doctest: +SKIP
>>> index.search("fts", "apple", None, k=1)  # doctest: +SKIP
[(0, 0.69...)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from semray.catalog.retrieval import ANN_MIN_ROWS, SearchMode, full_text_index, rank_rows
from semray.errors import ExecutionError, SearchError
from semray.log import get_logger

log = get_logger(__name__)

POSITION = "_pos"
TEXT = "text"
VECTOR = "vector"
TABLE_NAME = "rows"


@dataclass(frozen=True, slots=True)
class SearchIndex:
    """One LanceDB table in ``folder`` with the texts, their vectors (optional) and an FTS index (optional)."""

    folder: Path
    table: Any
    vectors: bool
    full_text: bool

    @classmethod
    def build(
        cls,
        folder: Path,
        texts: Sequence[str | None],
        vectors: npt.NDArray[np.float32] | None,
        full_text: bool,
    ) -> SearchIndex:
        """Write the rows and build the indexes the search modes need."""
        import lancedb
        from lancedb.index import HnswSq

        folder.mkdir(parents=True, exist_ok=True)
        columns: dict[str, pa.Array] = {
            POSITION: pa.array(range(len(texts)), pa.int64()),
            TEXT: pa.array([text or "" for text in texts], pa.string()),
        }
        if vectors is not None:
            dimension = int(vectors.shape[1]) if vectors.ndim == 2 and vectors.shape[0] else 1
            flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel(), pa.float32())
            columns[VECTOR] = pa.FixedSizeListArray.from_arrays(flat, dimension)
        database = lancedb.connect(str(folder))
        table = database.create_table(TABLE_NAME, pa.table(columns), mode="overwrite")
        if full_text and len(texts):
            table.create_index(TEXT, config=full_text_index(), replace=True)
        if vectors is not None and len(texts) >= ANN_MIN_ROWS:
            table.create_index(VECTOR, config=HnswSq(distance_type="cosine"), replace=True)
        log.info("search_index_built", folder=str(folder), rows=len(texts), vectors=vectors is not None, fts=full_text)
        return cls(folder, table, vectors is not None, full_text)

    def search(
        self, mode: SearchMode, query: str, query_vector: npt.NDArray[np.float32] | None, k: int
    ) -> list[tuple[int, float]]:
        """(row position, score) of the best ``k`` rows, best first.

        Scores: cosine similarity (vector), BM25 (fts), reciprocal-rank fusion (hybrid), as
        ranked by ``semray.catalog.retrieval``.
        """
        if self.table.count_rows() == 0:
            return []
        if mode in ("vector", "hybrid") and (query_vector is None or not self.vectors):
            raise ExecutionError(f"{mode} search needs vectors of the rows and of the query")
        if mode in ("fts", "hybrid") and not self.full_text:
            raise ExecutionError(f"{mode} search needs the full-text index")
        try:
            found = rank_rows(
                self.table, mode=mode, query=query, query_vector=query_vector, k=k, key=POSITION, columns=()
            )
        except SearchError as error:
            raise ExecutionError(f"SemSearch: {error}") from error
        ranked = sorted(((int(hit.row[POSITION]), hit.score) for hit in found), key=lambda item: (-item[1], item[0]))
        return ranked[:k]
