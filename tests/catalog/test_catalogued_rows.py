"""SemSearch answered by the catalog: rows mapped to documents, filtered inputs, best segment per document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from semray.catalog.catalogued_rows import CatalogRoute, search_catalogued_rows
from semray.catalog.search import create_segment_indexes
from semray.catalog.tables import segments_schema
from semray.errors import SearchError
from semray.pipeline.stages.set_ops import SearchStage
from semray.pipeline.workers.search import CatalogSearch, search_rows

DIMENSION = 4
DOCUMENTS = {
    "a.md": ["apple pie recipe", "oven at 200 degrees"],
    "b.md": ["sky and clouds", "apple trees in the wind"],
    "c.md": ["harbour boats", "fishing nets"],
}


def _vector(seed: int) -> list[float]:
    vector = np.random.default_rng(seed).normal(size=DIMENSION)
    unit: list[float] = (vector / np.linalg.norm(vector)).astype(np.float32).tolist()
    return unit


@pytest.fixture()
def segments(tmp_path: Path) -> Any:
    rows = []
    for number, (document, chunks) in enumerate(DOCUMENTS.items()):
        rows.append(_row(f"{document}#", "notes", document, "document", " ".join(chunks), number, 100 + number))
        for ordinal, text in enumerate(chunks):
            rows.append(_row(f"{document}#{ordinal}", "notes", document, "chunk", text, ordinal, 10 * number + ordinal))
    rows.append(_row("other#", "other", "a.md", "document", "apple apple apple", 0, 999))  # same path, other dataset
    table = lancedb.connect(str(tmp_path)).create_table(
        "segments", pa.Table.from_pylist(rows, schema=segments_schema(DIMENSION))
    )
    create_segment_indexes(table)
    return table


def _row(
    segment_id: str, dataset: str, document: str, level: str, text: str, ordinal: int, seed: int
) -> dict[str, Any]:
    return {
        "segment_id": segment_id,
        "dataset": dataset,
        "document_id": document,
        "parent_id": None,
        "level": level,
        "path": [document],
        "ordinal": ordinal,
        "text": text,
        "start": 0,
        "end": len(text),
        "topic": None,
        "vector": _vector(seed),
    }


def test_rows_are_ranked_by_their_documents_segments(segments: Any) -> None:
    rows = pa.table({"path": ["c.md", "b.md", "a.md"], "body": ["...", "...", "..."]})
    route = CatalogRoute(dataset="notes", key_column="path")
    found = search_catalogued_rows(segments, rows, route, "fts", "apple", None, k=5)
    assert {position for position, _ in found} == {1, 2}  # b.md and a.md hold "apple"; the other dataset is not read
    by_vector = search_catalogued_rows(segments, rows, route, "vector", "", np.array(_vector(102)), k=1)
    assert by_vector[0][0] == 0 and by_vector[0][1] == pytest.approx(1.0, abs=1e-5)  # c.md's document vector


def test_a_filtered_input_gets_its_own_top_k_and_chunks_count_for_their_document(segments: Any) -> None:
    rows = pa.table({"path": ["a.md", "c.md"]})
    chunks = CatalogRoute(dataset="notes", key_column="path", level="chunk")
    query = np.array(_vector(11))  # b.md's second chunk: b.md is not in the input
    found = search_catalogued_rows(segments, rows, chunks, "vector", "", query, k=2)
    assert sorted(position for position, _ in found) == [0, 1]  # each document once, from its best chunk
    assert (
        search_catalogued_rows(segments, pa.table({"path": pa.array([], pa.string())}), chunks, "fts", "x", None, 3)
        == []
    )
    with pytest.raises(SearchError, match="no column 'file'"):
        search_catalogued_rows(segments, rows, CatalogRoute("notes", "file"), "fts", "apple", None, k=1)
    with pytest.raises(SearchError, match="not one of"):
        CatalogRoute("notes", "path", level="page")


def test_sem_search_rows_take_the_catalog_seam(segments: Any, tmp_path: Path) -> None:
    rows = pa.table({"_rowid": [7, 8, 9], "path": ["a.md", "b.md", "c.md"], "body": ["x", "y", "z"]})
    stage = SearchStage(
        column="body",
        query="apple",
        k=2,
        mode="fts",
        output="score",
        operator_key="op1",
        index_root=tmp_path / "unused",
        input_columns=(("_rowid", "BIGINT"), ("path", "VARCHAR"), ("body", "VARCHAR")),
    )
    catalog = CatalogSearch(segments, CatalogRoute(dataset="notes", key_column="path"))
    result = search_rows(rows, stage, None, tmp_path / "unused", catalog=catalog)
    assert sorted(result.column("_rowid").to_pylist()) == [7, 8] and result.column_names[-1] == "score"
    assert not (tmp_path / "unused").exists()  # nothing indexed for the run
