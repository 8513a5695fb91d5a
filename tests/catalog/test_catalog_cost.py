"""A SemSearch over catalogued documents is priced as one query embedding, not one per row (no Ray, no model)."""

from __future__ import annotations

import pytest

from semray.catalog.document_ingest import DOCUMENT_COLUMNS
from semray.catalog.tables import segments_schema
from semray.cost_model import catalog_cost
from semray.cost_model.estimates import Interval
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.prices import TierProfile
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Filter, Limit, NamedExpr, Project, Scan, Schema, SemSearch, SourceSpec, walk
from semray.operators.keys import source_key, statistics_key
from semray.operators.relational import DOCUMENT_KEY, DOCUMENT_TEXT, CatalogPin

PIN = CatalogPin(dataset="notes", version=3, content_hash="9f2c", documents=True)
DOCUMENTS = Scan(
    source=SourceSpec(kind="parquet", path="/catalog/documents/notes-9f2c.parquet", catalog=PIN),
    source_schema=Schema.of(("document_id", "VARCHAR"), ("text", "VARCHAR"), ("year", "BIGINT")),
)
UNPINNED = Scan(source=DOCUMENTS.source.model_copy(update={"catalog": None}), source_schema=DOCUMENTS.source_schema)
EMBEDDING = {"embedding": TierProfile("embedding", 0.02, 0.0, 0.01, 50_000.0, 8, latency_per_call_s=0.01)}
ROWS = 20_000.0


def _estimate(search: SemSearch) -> tuple[float, float, float]:
    (scan,) = [node for node in walk(search) if isinstance(node, Scan)]
    statistics = PlanStatistics(
        source_rows={source_key(scan): Interval.exact(ROWS)},
        tokens_per_row={statistics_key(search): Interval.exact(300.0)},
    )
    found = estimate_plan(search, statistics, EMBEDDING).operator("")
    return found.input_tokens.value, found.dollars.value, found.rows_out.value


def test_the_document_columns_are_defined_once_and_are_the_catalogs_columns() -> None:
    # One IR fact next to CatalogPin, read by the cost model, the rules and the catalog (no layer keeps a copy).
    assert {DOCUMENT_KEY, DOCUMENT_TEXT} <= set(segments_schema(4).names) & set(DOCUMENT_COLUMNS.names)


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_a_catalog_search_embeds_only_its_query(mode: str) -> None:
    pinned = SemSearch(input=DOCUMENTS, column="text", query="chest pain", k=5, mode=mode)  # type: ignore[arg-type]
    run_scoped = SemSearch(input=UNPINNED, column="text", query="chest pain", k=5, mode=mode)  # type: ignore[arg-type]
    tokens, dollars, rows = _estimate(pinned)
    assert 1 <= tokens <= 5 and rows == 5  # "chest pain": a token or two, and the k rows
    every_row, every_row_dollars, _ = _estimate(run_scoped)
    assert every_row == ROWS * 300.0 + tokens and every_row_dollars > 1000 * dollars  # every row, and the query


def test_a_run_scoped_full_text_search_embeds_nothing() -> None:
    # No embed stage is lowered for it (only a LanceDB full-text index of the run): no call to price.
    run_scoped = SemSearch(input=UNPINNED, column="text", query="chest pain", k=5, mode="fts")
    tokens, dollars, rows = _estimate(run_scoped)
    assert (tokens, dollars, rows) == (0.0, 0.0, 5.0)


def test_a_full_text_catalog_search_calls_no_model() -> None:
    tokens, dollars, rows = _estimate(SemSearch(input=DOCUMENTS, column="text", query="chest pain", k=5, mode="fts"))
    assert (tokens, dollars, rows) == (0.0, 0.0, 5.0)


def test_filters_and_renaming_projections_keep_the_catalog_price_but_a_computed_text_does_not() -> None:
    recent = Filter(input=DOCUMENTS, predicate="year > 2020")
    renamed = Project(
        input=recent, exprs=(NamedExpr(name="doc", expr="document_id"), NamedExpr(name="body", expr="text"))
    )
    search = SemSearch(input=renamed, column="body", query="fever", k=3)
    assert catalog_cost.catalogued_documents(search) == (PIN, "doc")
    assert _estimate(search)[0] < 5
    computed = Project(
        input=DOCUMENTS,
        exprs=(NamedExpr(name="document_id", expr="document_id"), NamedExpr(name="text", expr="lower(text)")),
    )
    lowered = SemSearch(input=computed, column="text", query="fever", k=3)
    assert catalog_cost.catalogued_documents(lowered) is None
    assert _estimate(lowered)[0] == ROWS * 300.0 + 1  # every row, and the query ("fever": one token)
    without_key = Project(input=DOCUMENTS, exprs=(NamedExpr(name="text", expr="text"),))
    assert catalog_cost.catalogued_documents(SemSearch(input=without_key, column="text", query="fever", k=3)) is None


def test_a_search_over_or_under_a_limit_of_catalogued_documents_embeds_only_the_query() -> None:
    first = Limit(input=DOCUMENTS, count=500)
    search = SemSearch(input=first, column="text", query="chest pain", k=5)
    assert catalog_cost.catalogued_documents(search) == (PIN, "document_id")
    assert _estimate(search)[0] < 5  # not the 500 limited rows
    estimate = estimate_plan(
        Limit(input=SemSearch(input=DOCUMENTS, column="text", query="chest pain", k=5), count=2),
        PlanStatistics(source_rows={source_key(DOCUMENTS): Interval.exact(ROWS)}),
        EMBEDDING,
    )
    assert estimate.operator("input").input_tokens.value < 5 and estimate.rows.value == 2
