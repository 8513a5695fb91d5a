"""Catalogued datasets as plan sources: pinned Scans (JSON plans, EXPLAIN, versions, errors) and SemSearch
over catalogued documents lowered to the catalog's segments, embedding only the query. No Ray."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from semray.catalog.catalogued_rows import catalog_route as catalog_route_of
from semray.catalog.catalogued_rows import catalogued_table, pinned_segments
from semray.catalog.document_ingest import DOCUMENT_COLUMNS
from semray.catalog.document_pipeline import local_embedder
from semray.catalog.ingest import add_server, refresh
from semray.catalog.store import Catalog
from semray.errors import CatalogError, SearchError
from semray.operators import Scan, SemSearch, plan_from_json, plan_json_schema, plan_to_json
from semray.operators.relational import DOCUMENT_KEY, DOCUMENT_TEXT, CatalogPin
from semray.pipeline.lowering.driver import lower
from semray.pipeline.lowering.set_ops import catalog_route
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.set_ops import CatalogSearchStage, EmbedStage
from semray.pipeline.workers.search import search_rows
from semray.readers import read_catalog, read_parquet
from semray.serving.config import Prices
from semray.serving.profiles import resolve_serving
from semray.settings import Settings
from semray.transactions.batches import BatchLedger
from semray.transactions.journal import JOURNAL_NAME, JournalWriter, read_journal
from semray.transactions.records import BatchCommitted

NOTES = {
    "pie.md": "# Apple pie\n\nBake the apple pie in the oven for forty minutes.\n",
    "boats.md": "# Harbour\n\nFishing boats leave the harbour at dawn.\n",
    "orchard.txt": "The orchard grows apple trees beside the river.\n",
    "sky.txt": "Clouds drift over the hills on a windy day.\n",
}


@pytest.fixture(scope="module")
def catalogued(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, Path]]:
    """A catalog holding the documents dataset ``notes`` (version 1) and the CSV dataset ``prices`` (version 2)."""
    root = tmp_path_factory.mktemp("catalog-sources")
    folder = root / "notes"
    folder.mkdir()
    for name, text in NOTES.items():
        (folder / name).write_text(text)
    (root / "prices.csv").write_text("item,price\npen,1.5\n")
    settings = Settings(state_dir=root / "state")
    add_server(settings, str(folder), engine="local")
    add_server(settings, str(root / "prices.csv"), name="prices", engine="local")
    yield settings, folder


class CountingTiers:
    """The embedding tier of a run, counting the texts it is asked to embed."""

    def __init__(self, settings: Settings, prices: Prices | None = None) -> None:
        self.embedder = local_embedder(resolve_serving(settings.models).embedding)
        self.texts: list[str] = []
        self.prices = prices or Prices()

    def embedding_dollars(self, tokens: int) -> float:
        return self.prices.dollars(tokens, 0)

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        vectors: np.ndarray = self.embedder.embed(texts)
        return vectors


def _stages(stage: Stage) -> list[Stage]:
    return [stage, *(below for child in stage.inputs for below in _stages(child))]


def _rows(source: str) -> pa.Table:
    table = pq.read_table(source)
    return table.add_column(0, "_rowid", pa.array([f"r{number}" for number in range(table.num_rows)]))


def test_read_catalog_pins_the_version_in_json_plans_and_explain(catalogued: tuple[Settings, Path]) -> None:
    settings, _ = catalogued
    query = read_catalog("notes", settings)
    scan = query.plan
    assert isinstance(scan, Scan) and scan.source.kind == "parquet"
    record = Catalog.open(settings).dataset("notes")
    assert scan.source.catalog == CatalogPin(
        dataset="notes", version=2, content_hash=record.content_hash, documents=True
    )  # the latest version when the plan was made
    text = plan_to_json(scan)
    schema = plan_json_schema()
    jsonschema.validators.validator_for(schema)(schema).validate(json.loads(text))
    assert plan_from_json(text) == scan and plan_from_json(text).source.catalog == scan.source.catalog  # type: ignore[attr-defined]
    assert "catalog:notes@v2 (parquet:" in query.explain(optimize=False)
    # A source of no catalog serializes as before: no "catalog" key, so operator keys are unchanged.
    plain = json.loads(plan_to_json(read_parquet(scan.source.path or "", settings).plan))
    assert "catalog" not in plain["plan"]["source"]
    prices = read_catalog("prices", settings).plan
    assert isinstance(prices, Scan) and prices.source.catalog is not None and not prices.source.catalog.documents


def test_unknown_datasets_and_versions_are_refused_with_what_exists(catalogued: tuple[Settings, Path]) -> None:
    settings, _ = catalogued
    with pytest.raises(CatalogError, match="did you mean 'notes'"):
        read_catalog("note", settings)
    with pytest.raises(CatalogError, match="version 9 does not exist"):
        read_catalog("notes", settings, version=9)
    with pytest.raises(CatalogError, match="at catalog version 1"):
        read_catalog("prices", settings, version=1)


def test_a_pinned_plan_reads_its_version_after_a_reingest(tmp_path: Path) -> None:
    folder = tmp_path / "diary"
    folder.mkdir()
    (folder / "monday.txt").write_text("Rain all day.\n")
    settings = Settings(state_dir=tmp_path / "state")
    add_server(settings, str(folder), engine="local")
    first = plan_to_json(read_catalog("diary", settings).plan)
    (folder / "tuesday.txt").write_text("Sun at last.\n")
    refresh(settings, "diary", engine="local")
    rerun = plan_from_json(first)
    assert isinstance(rerun, Scan) and rerun.source.catalog is not None and rerun.source.catalog.version == 1
    assert pq.read_table(rerun.source.path).column("document_id").to_pylist() == ["monday.txt"]
    assert rerun == read_catalog("diary", settings, version=1).plan
    latest = read_catalog("diary", settings).plan
    assert isinstance(latest, Scan) and latest.source.catalog is not None and latest.source.catalog.version == 2
    assert pq.read_table(latest.source.path).num_rows == 2


def test_sem_search_over_catalogued_documents_embeds_only_the_query(
    catalogued: tuple[Settings, Path], tmp_path: Path
) -> None:
    settings, _ = catalogued
    query = (
        read_catalog("notes", settings)
        .filter("chars > 0")
        .select("text", "title", doc="document_id")
        .sem_search("text", "apple", k=2, mode="hybrid")
    )
    stage = lower(query.plan, settings)
    assert isinstance(stage, CatalogSearchStage)
    assert (stage.route.dataset, stage.route.key_column, stage.pin.version) == ("notes", "doc", 2)
    assert not any(isinstance(below, EmbedStage) for below in _stages(stage))
    assert "the catalog's document segments of 'notes' at version 2" in stage.describe()
    assert stage.model_tiers() == {"embedding"}

    scan = read_catalog("notes", settings).plan
    assert isinstance(scan, Scan) and scan.source.path is not None
    rows = _rows(scan.source.path).rename_columns(["_rowid", "doc", "format", "encoding", "title", "chars", "text"])
    tiers = CountingTiers(settings)
    found = search_rows(rows.select(["_rowid", "text", "title", "doc"]), stage, tiers, tmp_path / "index")  # type: ignore[arg-type]
    assert tiers.texts == ["apple"]  # one embedding call, the query's; no row embedded
    assert set(found.column("doc").to_pylist()) == {"pie.md", "orchard.txt"}
    assert found.column_names == ["_rowid", "text", "title", "doc", "score"]
    assert not (tmp_path / "index").exists()  # nothing indexed for the run


def test_the_query_embedding_is_journaled_in_the_runs_usage_and_not_paid_again(
    catalogued: tuple[Settings, Path], tmp_path: Path
) -> None:
    settings, _ = catalogued
    query = read_catalog("notes", settings).select("text", doc="document_id").sem_search("text", "apple pie", k=2)
    stage = lower(query.plan, settings)
    assert isinstance(stage, CatalogSearchStage)
    scan = read_catalog("notes", settings).plan
    assert isinstance(scan, Scan) and scan.source.path is not None
    rows = _rows(scan.source.path).rename_columns(["_rowid", "doc", "format", "encoding", "title", "chars", "text"])
    rows = rows.select(["_rowid", "text", "doc"])
    JournalWriter.create(tmp_path / JOURNAL_NAME).close()
    ledger, tiers = BatchLedger(tmp_path, attempt=1), CountingTiers(settings, Prices(input_per_million=0.02))
    first = search_rows(rows, stage, tiers, tmp_path / "index", ledger=ledger)  # type: ignore[arg-type]
    (commit,) = [r for r in read_journal(tmp_path / JOURNAL_NAME).records if isinstance(r, BatchCommitted)]
    assert (commit.operator_key, commit.row_ids, commit.rows_out) == (stage.operator_key, (), 0)
    assert commit.usage.calls == 1 and commit.usage.tokens_in >= 2  # one call, the query's tokens
    assert commit.usage.dollars == pytest.approx(commit.usage.tokens_in * 0.02 / 1e6)  # at the embedding price
    resumed = BatchLedger(tmp_path, attempt=2)
    again = search_rows(rows, stage, tiers, tmp_path / "index", ledger=resumed)  # type: ignore[arg-type]
    assert tiers.texts == ["apple pie"]  # the resume read the vector back: embedded (and paid) once
    assert again.equals(first)
    search_rows(rows, dataclasses.replace(stage, mode="fts"), None, tmp_path / "index", ledger=ledger)
    commits = [r for r in read_journal(tmp_path / JOURNAL_NAME).records if isinstance(r, BatchCommitted)]
    assert len(commits) == 1  # a full-text search embeds nothing and commits nothing


def test_other_inputs_keep_the_run_scoped_index(catalogued: tuple[Settings, Path]) -> None:
    settings, _ = catalogued
    notes = read_catalog("notes", settings)
    scan = notes.plan
    assert isinstance(scan, Scan) and scan.source.path is not None
    unpinned = read_parquet(scan.source.path, settings)
    for query in (
        unpinned.sem_search("text", "apple", k=2),  # the same file, not read through the catalog
        notes.sem_search("title", "apple", k=2),  # segments are made from the text, not the title
        notes.select("document_id", text="upper(text)").sem_search("text", "apple", k=2),  # computed text
        notes.select("text").sem_search("text", "apple", k=2),  # no document ids to map rows to
    ):
        assert isinstance(query.plan, SemSearch)
        assert catalog_route(query.plan) is None and not isinstance(lower(query.plan, settings), CatalogSearchStage)
    # A LIMIT keeps some documents unchanged: the catalog ranks those, so only the query is embedded.
    limited = notes.limit(2).sem_search("text", "apple", k=2).plan
    assert isinstance(limited, SemSearch)
    assert isinstance(lower(limited, settings), CatalogSearchStage)
    csv = read_catalog("prices", settings).select(text="item", document_id="item")
    search = csv.sem_search("text", "pen", k=1).plan
    assert isinstance(search, SemSearch) and catalog_route(search) is None  # a CSV dataset has no segments
    assert not isinstance(lower(scan, settings), CatalogSearchStage)  # not a SemSearch


def test_the_documents_scan_has_the_columns_the_route_reads() -> None:
    assert {DOCUMENT_KEY, DOCUMENT_TEXT} <= set(DOCUMENT_COLUMNS.names)


def test_pinned_segments_refuse_a_catalog_that_is_not_the_planned_one(
    catalogued: tuple[Settings, Path], tmp_path: Path
) -> None:
    settings, _ = catalogued
    scan = read_catalog("notes", settings).plan
    assert isinstance(scan, Scan) and scan.source.catalog is not None
    pin = scan.source.catalog
    assert pinned_segments(settings.catalog_path, pin).count_rows() > len(NOTES)
    with pytest.raises(CatalogError, match="no catalog at"):
        pinned_segments(tmp_path / "elsewhere", pin)
    with pytest.raises(CatalogError, match="rebuilt"):
        pinned_segments(settings.catalog_path, pin.model_copy(update={"content_hash": "0" * 64}))
    with pytest.raises(CatalogError, match="version 7 does not exist"):
        pinned_segments(settings.catalog_path, pin.model_copy(update={"version": 7}))
    with pytest.raises(CatalogError, match="not found in the catalog at catalog version 1"):
        pinned_segments(settings.catalog_path, pin.model_copy(update={"dataset": "prices", "version": 1}))
    prices = read_catalog("prices", settings).plan
    assert isinstance(prices, Scan) and prices.source.catalog is not None
    with pytest.raises(CatalogError, match="has no segments"):
        pinned_segments(settings.catalog_path, prices.source.catalog)


def test_a_query_vector_of_another_model_is_refused(catalogued: tuple[Settings, Path], tmp_path: Path) -> None:
    settings, _ = catalogued
    query = read_catalog("notes", settings).sem_search("text", "apple", k=1, mode="vector")
    stage = lower(query.plan, settings)
    assert isinstance(stage, CatalogSearchStage)
    scan = read_catalog("notes", settings).plan
    assert isinstance(scan, Scan) and scan.source.path is not None

    class OtherModel:
        def embed(self, texts: list[str]) -> Any:
            return np.ones((len(texts), 3), dtype=np.float32)

    with pytest.raises(SearchError, match="3-dimensional vectors, but the catalog's segments"):
        search_rows(_rows(scan.source.path), stage, OtherModel(), tmp_path)  # type: ignore[arg-type]


def test_a_search_at_a_level_returns_segments_of_the_pinned_version_with_path_and_span(
    catalogued: tuple[Settings, Path],
) -> None:
    """What the catalog hands lowering and execution for ``sem_search(..., level=)``: the route, the pinned
    segments and the output table (``catalogued_rows.catalog_route`` / ``catalogued_table``)."""
    settings, _ = catalogued
    query = (
        read_catalog("notes", settings)
        .select("text", doc="document_id")
        .sem_search("text", "apple", k=3, mode="fts", level="paragraph")
    )
    assert isinstance(query.plan, SemSearch)
    found = catalog_route_of(query.plan)
    assert found is not None
    pin, route = found
    assert (route.level, route.segment_hits, route.key_column) == ("paragraph", True, "doc")
    scan = read_catalog("notes", settings).plan
    assert isinstance(scan, Scan) and scan.source.path is not None
    rows = _rows(scan.source.path).rename_columns(["_rowid", "doc", "format", "encoding", "title", "chars", "text"])
    rows = rows.select(["_rowid", "text", "doc"])
    table = catalogued_table(
        pinned_segments(settings.catalog_path, pin), rows, route, "fts", "apple", None, 3, rows.column_names, "score"
    )
    assert table.column_names == list(query.plan.output_schema.names)
    hits = table.to_pylist()
    assert {hit["doc"] for hit in hits} == {"pie.md", "orchard.txt"}
    assert all("apple" in hit["segment_text"].lower() for hit in hits)
    for hit in hits:  # the span is the segment's place in the document's text, the path its headings
        assert hit["text"][hit["segment_start"] : hit["segment_end"]] == hit["segment_text"]
        assert hit["segment_path"][0] == hit["doc"] and hit["_rowid"].endswith("#" + hit["segment_id"])
    pie = [hit for hit in hits if hit["doc"] == "pie.md"]
    assert pie and all(hit["segment_path"] == ["pie.md", "Apple pie"] for hit in pie)
