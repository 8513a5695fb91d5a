"""Searching the catalog's hierarchy at a level: segment hits with path and span, the best-fitting level,
the SemSearch node's ``level`` (schema, the catalogued input it needs, the key column pruning must keep)
and its row estimate. Hand-made segments with chosen vectors; no Ray, no model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from semray.catalog.catalogued_rows import (
    CatalogRoute,
    catalog_route,
    catalogued_table,
    search_catalogued_segments,
)
from semray.catalog.search import create_segment_indexes, search_best_fitting, search_segments
from semray.catalog.tables import segments_schema
from semray.cost_model.cardinality import estimated_rows, rule_of
from semray.cost_model.estimates import Interval
from semray.cost_model.plan_cost import EstimationContext
from semray.cost_model.statistics import PlanStatistics
from semray.errors import PlanError, SearchError
from semray.operators import Project, Scan, SemSearch, SourceSpec
from semray.operators.catalogued import SEGMENT_HIT_COLUMNS, catalogued_documents
from semray.operators.relational import CatalogPin, NamedExpr
from semray.operators.schema import Column, Schema
from semray.planner.optimize import optimize_plan

DIMENSION = 4
QUERY = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
TEXT_A = "# Fruit\n\nApple pie recipe.\n\nOven at 200 degrees."
TEXT_B = "Boats in the harbour."


def _toward(similarity: float, axis: int = 1) -> list[float]:
    """A unit vector whose cosine with QUERY is ``similarity``."""
    vector = np.zeros(DIMENSION, dtype=np.float32)
    vector[0], vector[axis] = similarity, np.sqrt(1.0 - similarity**2)
    return vector.tolist()


def _segment(segment_id: str, document: str, level: str, parent: str | None, path: list[str], text: str,
             source: str, similarity: float, ordinal: int = 0) -> dict[str, Any]:  # fmt: skip
    start = source.index(text)
    return {
        "segment_id": segment_id,
        "dataset": "notes",
        "document_id": document,
        "parent_id": parent,
        "level": level,
        "path": path,
        "ordinal": ordinal,
        "text": text,
        "start": start,
        "end": start + len(text),
        "topic": None,
        "vector": _toward(similarity),
    }


@pytest.fixture()
def segments(tmp_path: Path) -> Any:
    """a.md: document > section 'Fruit' > three paragraphs; b.md: document > one paragraph.

    By vector, a.md's 'Apple pie recipe.' paragraph is the best (1.0), then its section (0.95) and
    document (0.9), the 'Oven' paragraph (0.6), b.md's paragraph (0.5) and document (0.45).
    """
    rows = [
        _segment("a", "a.md", "document", None, ["a.md"], TEXT_A, TEXT_A, 0.9),
        _segment("a/s", "a.md", "section", "a", ["a.md", "Fruit"], TEXT_A, TEXT_A, 0.95),
        _segment("a/s/h", "a.md", "paragraph", "a/s", ["a.md", "Fruit"], "# Fruit", TEXT_A, 0.1, 0),
        _segment("a/s/1", "a.md", "paragraph", "a/s", ["a.md", "Fruit"], "Apple pie recipe.", TEXT_A, 1.0, 1),
        _segment("a/s/2", "a.md", "paragraph", "a/s", ["a.md", "Fruit"], "Oven at 200 degrees.", TEXT_A, 0.6, 2),
        _segment("b", "b.md", "document", None, ["b.md"], TEXT_B, TEXT_B, 0.45),
        _segment("b/1", "b.md", "paragraph", "b", ["b.md"], TEXT_B, TEXT_B, 0.5),
    ]
    table = lancedb.connect(str(tmp_path)).create_table(
        "segments", pa.Table.from_pylist(rows, schema=segments_schema(DIMENSION))
    )
    create_segment_indexes(table)
    return table


def test_each_hit_is_at_the_level_that_fits_it_best(segments: Any) -> None:
    ranked = search_segments(segments, "", QUERY, k=3, mode="vector")
    assert [hit.segment_id for hit in ranked] == ["a/s/1", "a/s", "a"]  # one answer, three times
    best = search_best_fitting(segments, "", QUERY, k=3, mode="vector")
    assert [hit.segment_id for hit in best] == ["a/s/1", "a/s/2", "b/1"]  # its section and document overlap it
    assert (best[0].level, best[0].path, best[0].start, best[0].end) == ("paragraph", ("a.md", "Fruit"), 9, 26)
    assert all(TEXT_A[hit.start : hit.end] == hit.text for hit in best if hit.document_id == "a.md")
    assert search_best_fitting(segments, "", QUERY, k=3, mode="vector", datasets=[]) == []


def test_segment_hits_carry_their_document_row_path_span_and_a_row_id_per_segment(segments: Any) -> None:
    rows = pa.table({"_rowid": ["r1", "r2"], "doc": ["b.md", "a.md"], "text": [TEXT_B, TEXT_A]})
    route = CatalogRoute("notes", "doc", "paragraph", segment_hits=True)
    table = catalogued_table(segments, rows, route, "vector", "", QUERY, 3, ("_rowid", "doc", "text"), "score")
    expected = ["_rowid", "doc", "text", "score", *(name for name, _ in SEGMENT_HIT_COLUMNS)]
    assert table.column_names == expected
    assert table.column("segment_id").to_pylist() == ["a/s/1", "a/s/2", "b/1"]  # two hits of one document
    assert table.column("_rowid").to_pylist() == ["r2#a/s/1", "r2#a/s/2", "r1#b/1"]
    assert table.column("doc").to_pylist() == ["a.md", "a.md", "b.md"]
    assert table.column("segment_path").to_pylist()[0] == ["a.md", "Fruit"]
    for row in table.to_pylist():
        assert row["text"][row["segment_start"] : row["segment_end"]] == row["segment_text"]
    assert table.column("score").to_pylist()[0] == pytest.approx(1.0, abs=1e-5)
    rows_shape = catalogued_table(
        segments, rows, CatalogRoute("notes", "doc", "paragraph"), "vector", "", QUERY, 3, ("_rowid", "doc"), "score"
    )
    assert rows_shape.column("_rowid").to_pylist() == ["r2", "r1"]  # each document once, by its best paragraph


def test_segment_hits_are_restricted_to_the_inputs_documents(segments: Any) -> None:
    only_b = pa.table({"doc": ["b.md"]})
    route = CatalogRoute("notes", "doc", "paragraph", segment_hits=True)
    hits = search_catalogued_segments(segments, only_b, route, "vector", "", QUERY, 5)
    assert [(position, hit.segment_id) for position, hit in hits] == [(0, "b/1")]
    found = search_catalogued_segments(segments, only_b, route, "fts", "recipe", None, 5)
    assert found == []  # the recipe is a.md's, which the input does not hold
    sections = CatalogRoute("notes", "doc", "section", segment_hits=True)
    both = pa.table({"doc": ["a.md", "b.md"]})  # every document: no IN list, the same hits
    assert [
        hit.segment_id for _, hit in search_catalogued_segments(segments, both, sections, "fts", "oven", None, 5)
    ] == ["a/s"]
    with pytest.raises(SearchError, match="not one of"):
        CatalogRoute("notes", "doc", "page", segment_hits=True)


# the SemSearch node -------------------------------------------------------------------------------

PIN = CatalogPin(dataset="notes", version=2, content_hash="c0ffee", documents=True)
DOCUMENTS = Schema(
    columns=(
        Column(name="document_id", type="VARCHAR"),
        Column(name="title", type="VARCHAR"),
        Column(name="text", type="VARCHAR"),
    )
)


def _documents(pin: CatalogPin | None = PIN) -> Scan:
    return Scan(source=SourceSpec(kind="parquet", path="/c/notes.parquet", catalog=pin), source_schema=DOCUMENTS)


def test_a_level_adds_the_segment_columns_and_needs_catalogued_documents() -> None:
    search = SemSearch(input=_documents(), column="text", query="apple", k=3, level="paragraph")
    added = search.output_schema.names[len(search.input.output_schema.names) :]
    assert added == ("score", "segment_id", "segment_path", "segment_start", "segment_end", "segment_text")
    assert search.output_schema.type_of("segment_path") == "VARCHAR[]"
    assert "level=paragraph" in search.label()
    pin, route = catalog_route(search) or (None, None)
    assert pin == PIN and route == CatalogRoute("notes", "document_id", "paragraph", segment_hits=True)
    plain = SemSearch(input=_documents(), column="text", query="apple", k=3)
    assert plain.output_schema.names[-1] == "score" and catalog_route(plain) == (
        PIN,
        CatalogRoute("notes", "document_id"),
    )
    with pytest.raises(PlanError, match="catalogued dataset"):
        SemSearch(input=_documents(pin=None), column="text", query="apple", k=3, level="chunk")
    with pytest.raises(PlanError, match="catalogued dataset"):
        SemSearch(input=_documents(), column="title", query="apple", k=3, level="chunk")  # segments are of text
    with pytest.raises(PlanError):
        SemSearch(input=_documents(), column="text", query="apple", k=3, level="page")  # type: ignore[arg-type]


def test_pruning_columns_keeps_the_document_key_the_catalog_route_needs() -> None:
    # Selecting only the title and score above the search: document_id is read by nobody above it.
    search = SemSearch(input=_documents(), column="text", query="apple", k=2)
    plan = Project(input=search, exprs=(NamedExpr(name="title", expr="title"), NamedExpr(name="score", expr="score")))
    optimized = optimize_plan(plan).plan
    (found,) = [node for node in _walk(optimized) if isinstance(node, SemSearch)]
    assert catalogued_documents(found) == (PIN, "document_id")  # still ranked by the catalog, not re-embedded
    assert found.columns_read() == {"text", "document_id"}
    renamed = Project(
        input=_documents(), exprs=(NamedExpr(name="doc", expr="document_id"), NamedExpr(name="text", expr="text"))
    )
    assert SemSearch(input=renamed, column="text", query="x", k=1).columns_read() == {"text", "doc"}


def test_a_level_search_is_estimated_as_k_segments_whatever_its_input() -> None:
    context = EstimationContext(statistics=PlanStatistics(), profiles={}, tiers={})
    by_level = SemSearch(input=_documents(), column="text", query="apple", k=10, level="chunk")
    assert estimated_rows(by_level, (Interval.exact(3.0),), context) == Interval(10.0, 0.0, 10.0)
    assert estimated_rows(by_level, (Interval.exact(0.0),), context) == Interval(0.0, 0.0, 0.0)
    plain = SemSearch(input=_documents(), column="text", query="apple", k=10)
    assert estimated_rows(plain, (Interval.exact(3.0),), context) == Interval.exact(3.0)
    assert rule_of(by_level).bound(by_level, (3,)) == 10  # three documents may hold ten paragraphs
    assert rule_of(plain).bound(plain, (3,)) == 3


def _walk(node: Any) -> list[Any]:
    return [node, *(below for child in node.children for below in _walk(child))]
