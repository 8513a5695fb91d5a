"""Catalogued datasets as plan sources, end to end on a local Ray: SemSearch over ``read_catalog`` ranks
by the catalog's segments (only the query embedded), agrees with the run-scoped index over the same rows,
works as full-text search with no embedding tier, and a JSON plan keeps reading its pinned version.

The embedding tier is wrapped so every text sent to it is recorded in one Ray actor: the search runs
in a Ray task and the embed stage in an actor pool, both outside the test's process.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
import ray
from ray import cloudpickle

from semray.api import Query, read_catalog, read_parquet
from semray.catalog.ingest import add_server, refresh
from semray.operators import Scan, plan_from_json, plan_to_json
from semray.pipeline.runs import execute as run
from semray.pipeline.runs.resume_record import Job
from semray.readers import sql as semray_sql
from semray.serving.deployments import TierHandles
from semray.settings import Settings

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # a minute: an ingest, the embedding tier and two actor pools

NOTES = {
    "pie.md": "# Apple pie\n\nBake the apple pie in the oven for forty minutes.\n",
    "orchard.txt": "The orchard grows apple trees beside the river.\n",
    "cider.txt": "Pressed apple cider is sold at the farm market.\n",
    "boats.md": "# Harbour\n\nFishing boats leave the harbour at dawn.\n",
    "sky.txt": "Clouds drift over the hills on a windy day.\n",
}
WITHOUT_CIDER = "document_id <> 'cider.txt'"
"""Drops one of the three apple notes: a top 2 that ignored the filter would include it."""


@ray.remote(num_cpus=0)
class EmbeddedTexts:
    """Every text sent to the embedding tier, in the order the calls arrived."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def add(self, texts: list[str]) -> None:
        self.texts.extend(texts)

    def take(self) -> list[str]:
        texts, self.texts = self.texts, []
        return texts


@dataclass
class CountingHandles(TierHandles):
    """The run's tier handles, recording what is embedded (pickled into the tasks and actors that embed)."""

    recorder: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "recorder": self.recorder}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        ray.get(self.recorder.add.remote([str(text) for text in texts]))
        return super().embed(texts)


@pytest.fixture(scope="module")
def settings(ray_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The session's Ray settings with a catalog of their own holding the documents dataset ``notes``."""
    root = tmp_path_factory.mktemp("catalog-search-ray")
    catalogued = ray_settings.model_copy(update={"catalog_dir": root / "catalog"})
    add_server(catalogued, str(_write_notes(root / "notes")), engine="local")
    return catalogued


@pytest.fixture(scope="module")
def recorder(settings: Settings) -> Iterator[Any]:
    """The actor the wrapped embedding tier reports to; this module's classes travel to Ray by value."""
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    actor = EmbeddedTexts.remote()  # type: ignore[attr-defined]
    yield actor
    ray.kill(actor)
    cloudpickle.unregister_pickle_by_value(module)  # type: ignore[no-untyped-call]


@pytest.fixture
def embedded(recorder: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Runs started in this test embed through ``CountingHandles``; ``ray.get(embedded.take.remote())`` reads them."""
    real = run.start_tiers  # type: ignore[attr-defined]

    def counting(config: Any, settings: Settings, tiers: Sequence[str]) -> TierHandles:
        handles = real(config, settings, tiers=tiers)
        return CountingHandles(
            apps=handles.apps, retries=handles.retries, timeout_s=handles.timeout_s, recorder=recorder
        )

    monkeypatch.setattr(run, "start_tiers", counting)
    ray.get(recorder.take.remote())
    yield recorder


def _write_notes(folder: Path, notes: dict[str, str] = NOTES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in notes.items():
        (folder / name).write_text(text)
    return folder


def _documents(query: Query) -> list[str]:
    return _documents_of(query.execute().table)


def _documents_of(table: Any) -> list[str]:
    scores = table.column("score").to_pylist()
    assert scores == sorted(scores, reverse=True)
    return [str(value) for value in table.column("document_id").to_pylist()]


def _apple_search(source: Query, mode: Literal["vector", "fts", "hybrid"] = "hybrid") -> Query:
    return source.filter(WITHOUT_CIDER).select("document_id", "text").sem_search("text", "apple", k=2, mode=mode)


def _plain_parquet(settings: Settings) -> Query:
    """The catalog's documents file of ``notes`` read as plain Parquet: no pin, so the run-scoped path."""
    scan = read_catalog("notes", settings).plan
    assert isinstance(scan, Scan) and scan.source.path is not None
    return read_parquet(scan.source.path, settings)


def test_hybrid_search_over_a_catalogued_dataset_embeds_only_the_query(settings: Settings, embedded: Any) -> None:
    catalogued = _apple_search(read_catalog("notes", settings))
    physical = catalogued.explain()
    assert "the catalog's document segments of 'notes' at version 1" in physical, physical
    assert "Embed " not in physical and "run-scoped LanceDB" not in physical, physical

    result = catalogued.execute()
    found = [str(value) for value in result.table.column("document_id").to_pylist()]
    assert sorted(found) == ["orchard.txt", "pie.md"]
    assert ray.get(embedded.take.remote()) == ["apple"]  # one call, the query's: no row was embedded
    assert result.usage.calls == 1  # and the run counts it

    plain = _apple_search(_plain_parquet(settings))
    assert "Embed " in plain.explain() and "run-scoped LanceDB" in plain.explain()
    run_scoped = plain.execute()
    assert _documents_of(run_scoped.table) == found  # the run-scoped index ranks the same rows the same way
    rows_embedded = ray.get(embedded.take.remote())
    assert sorted(rows_embedded) == sorted([*(NOTES[name] for name in NOTES if name != "cider.txt"), "apple"])
    # The run counts what it embedded: one call per row (the cost model's unit) and the query's.
    assert run_scoped.usage.calls == len(rows_embedded)
    assert run_scoped.usage.tokens_in >= sum(len(text.split()) for text in rows_embedded)


def test_full_text_search_over_a_catalogued_dataset_needs_no_embedding_tier(settings: Settings, embedded: Any) -> None:
    catalogued = _apple_search(read_catalog("notes", settings), mode="fts")
    assert Job.prepare(catalogued.plan, settings, None).tiers == ()  # no tier is started for the run
    assert "nothing embedded" in catalogued.explain()
    assert sorted(_documents(catalogued)) == ["orchard.txt", "pie.md"]
    assert ray.get(embedded.take.remote()) == []


def test_a_json_plan_reruns_its_pinned_version_after_a_reingest(
    settings: Settings, embedded: Any, tmp_path: Path
) -> None:
    pinned = settings.model_copy(update={"catalog_dir": tmp_path / "catalog"})
    folder = _write_notes(tmp_path / "notes")
    add_server(pinned, str(folder), engine="local")
    search = _apple_search(read_catalog("notes", pinned))
    first = _documents(search)
    saved = plan_to_json(search.plan)
    assert plan_from_json(saved) == search.plan
    assert _documents(Query(plan_from_json(saved), pinned)) == first

    (folder / "tart.md").write_text("# Apple tart\n\nAn apple tart: apple slices on apple jam, apple on apple.\n")
    (folder / "pie.md").write_text("# Plum pie\n\nBake the plum pie in the oven for forty minutes.\n")
    refresh(pinned, "notes", engine="local")
    latest = _documents(_apple_search(read_catalog("notes", pinned)))
    assert "tart.md" in latest and "pie.md" not in latest  # the re-ingest changed the answer
    rerun = Query(plan_from_json(saved), pinned)
    assert "the catalog's document segments of 'notes' at version 1" in rerun.explain()
    assert _documents(rerun) == first
    assert ray.get(embedded.take.remote()) == ["apple"] * 4  # four runs, each embedding its query only


def _hits(table: Any) -> list[dict[str, Any]]:
    """The segment hits of a level search, after checking each one's span and path against its document."""
    hits = table.to_pylist()
    scores = [hit["score"] for hit in hits]
    assert scores == sorted(scores, reverse=True)
    for hit in hits:
        assert hit["text"][hit["segment_start"] : hit["segment_end"]] == hit["segment_text"]
        assert hit["segment_path"][0] == hit["document_id"]
    return hits


def test_a_search_at_a_level_runs_from_python_sql_and_json_through_the_catalog(
    settings: Settings, embedded: Any
) -> None:
    """``level=`` end to end on Ray: the run returns the catalog's paragraph segments (path, span, text),
    embeds only the query and counts that call; SQL's sixth argument and a JSON round trip give the same."""
    notes = read_catalog("notes", settings)
    search = notes.filter(WITHOUT_CIDER).sem_search("text", "apple", k=2, mode="hybrid", level="paragraph")
    physical = search.explain()
    assert "the catalog's paragraph segments of 'notes' at version 1" in physical, physical
    assert "Embed " not in physical and "run-scoped LanceDB" not in physical, physical

    result = search.execute()
    hits = _hits(result.table)
    assert len(hits) == 2 and {hit["document_id"] for hit in hits} <= {"pie.md", "orchard.txt", "boats.md", "sky.txt"}
    assert ray.get(embedded.take.remote()) == ["apple"]  # no row or segment embedded: the catalog's vectors
    assert result.usage.calls == 1 and result.usage.tokens_in >= 1

    fts = notes.filter(WITHOUT_CIDER).sem_search("text", "apple", k=3, mode="fts", level="paragraph").execute()
    found = _hits(fts.table)
    assert {hit["document_id"] for hit in found} == {"pie.md", "orchard.txt"}  # cider filtered out before ranking
    assert all("apple" in hit["segment_text"].lower() for hit in found)
    pie = [hit for hit in found if hit["document_id"] == "pie.md"]
    assert pie and all(hit["segment_path"] == ["pie.md", "Apple pie"] for hit in pie)

    compiled = semray_sql(
        "SELECT * FROM SEM_SEARCH((SELECT * FROM notes WHERE document_id <> 'cider.txt'), "
        "'text', 'apple', 3, 'fts', 'paragraph')",
        {"notes": notes},
        settings,
    )
    assert "the catalog's paragraph segments" in compiled.explain()
    from_sql = _hits(compiled.execute().table)
    ranked = [(hit["segment_id"], hit["score"]) for hit in found]
    assert [(hit["segment_id"], hit["score"]) for hit in from_sql] == ranked

    reread = Query(plan_from_json(plan_to_json(search.plan)), settings)
    assert reread.plan == search.plan
    again = _hits(reread.execute().table)
    assert [hit["segment_id"] for hit in again] == [hit["segment_id"] for hit in hits]
    assert ray.get(embedded.take.remote()) == ["apple"]  # the rerun embeds its query once more, nothing else
