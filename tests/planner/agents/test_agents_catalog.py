"""``semray.ask`` over the LanceDB catalog: an in-process ingest, then a replayed plan that scans it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import accepts, choose, outline, plan, recorded

import semray
from semray.catalog.ingest import add_server
from semray.catalog.memory import MemoryStore
from semray.catalog.store import Catalog
from semray.operators import plan_from_json, walk
from semray.planner.agents.catalog_adapter import LanceCatalogView, TierEmbedding
from semray.planner.agents.catalog_view import DatasetProfile
from semray.planner.agents.memory import FAILURE
from semray.serving.profiles import resolve_serving
from semray.settings import Settings

QUESTION = "What is the average rating of the lamp reviews?"
REVIEWS = "shop_reviews"


def _shop(root: Path) -> Path:
    """A CSV of reviews and three markdown documents (a rating guide among them)."""
    folder = root / "shop"
    folder.mkdir()
    (folder / "reviews.csv").write_text(
        "product,review,rating\nlamp,bright light,5\nkettle,broke on day two,1\nlamp,works fine,4\nchair,wobbles,2\n",
        encoding="utf-8",
    )
    (folder / "rating_guide.md").write_text(
        "# Ratings\n\nA review rating runs from 1 (worst) to 5 (best). Average ratings per product.\n",
        encoding="utf-8",
    )
    (folder / "shipping.md").write_text("# Shipping\n\nParcels leave the warehouse within two days.\n")
    (folder / "returns.md").write_text("# Returns\n\nA kettle may be returned within thirty days.\n")
    return folder


@pytest.fixture(scope="module")
def catalogued(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("catalogued")
    settings = Settings(state_dir=root / "state")
    report = add_server(settings, str(_shop(root)), engine="local")
    assert set(report.datasets) == {REVIEWS, "shop"}
    return settings


def _gold(profile: DatasetProfile) -> dict[str, Any]:
    scan = {
        "op": "scan",
        "source": {"kind": profile.kind, "path": profile.uri, "options": dict(profile.options)},
        "source_schema": {"columns": [{"name": c.name, "type": c.type} for c in profile.columns]},
    }
    lamps = {"op": "filter", "predicate": "product = 'lamp'", "input": scan}
    return {
        "version": 1,
        "plan": {
            "op": "aggregate",
            "keys": [],
            "aggs": [{"name": "avg_rating", "expr": "avg(rating)"}],
            "input": lamps,
        },
    }


def test_the_catalog_view_finds_and_describes_what_the_ingest_catalogued(catalogued: Settings) -> None:
    view = LanceCatalogView(Catalog.open(catalogued), resolve_serving(catalogued.models).embedding)
    names = [hit.name for hit in view.find_datasets("review ratings of products")]
    assert set(names) == {REVIEWS, "shop"}
    profile = view.describe(REVIEWS)
    assert (profile.kind, profile.row_count) == ("csv", 4)
    assert profile.schema().names == ("product", "review", "rating")
    rating = next(column for column in profile.columns if column.name == "rating")
    assert (rating.minimum, rating.maximum) == ("1", "5")
    product = next(column for column in profile.columns if column.name == "product")
    assert product.top_values[0] == "lamp"
    assert Path(profile.uri).name == "reviews.csv" and len(profile.samples) >= 1
    segments = view.search_segments("how are review ratings scaled", 3)
    assert segments and any("1 (worst) to 5 (best)" in segment.text for segment in segments)
    assert all(segment.dataset == "shop" for segment in segments)


def test_ask_plans_over_the_real_catalog_and_the_scan_reads_the_catalogued_file(catalogued: Settings) -> None:
    view = LanceCatalogView(Catalog.open(catalogued), resolve_serving(catalogued.models).embedding)
    gold = _gold(view.describe(REVIEWS))
    wrong = json.loads(json.dumps(gold))
    wrong["plan"]["input"]["predicate"] = "item = 'lamp'"  # a column the catalogued CSV lacks
    model = recorded(
        profiling_choose=[choose(REVIEWS, "shop"), choose(REVIEWS)],
        planning_outline=[outline("scan", "filter", "aggregate")],
        manipulation_fill=[plan(wrong), plan(gold)],
        semantic_judge=accepts(),
    )
    result = semray.ask(QUESTION, settings=catalogued, model=model, dry_run=True)
    assert result.answer is None and result.run_id is None
    assert result.datasets == (REVIEWS,)  # the data error sent the profiling agent back; it kept the CSV
    assert result.iterations == 2
    assert model.remaining() == {key: 0 for key in model.remaining()}
    validated = plan_from_json(result.plan_json)
    assert validated.op == "aggregate"
    scans = [node for node in walk(validated) if node.op == "scan"]
    assert len(scans) == 1
    source = scans[0].source  # type: ignore[attr-defined]
    assert source == Catalog.open(catalogued).pinned_scan(REVIEWS)  # pinned to the version the agents described
    assert source.catalog is not None and source.catalog.version == Catalog.open(catalogued).version()
    assert Path(source.path).read_text(encoding="utf-8").startswith("product,review,rating")
    search = next(step for step in result.steps if (step.agent, step.kind) == ("profiling", "search"))
    assert REVIEWS in search.output and "shop" in search.output
    # The wrong column was remembered in the catalog's memory table (the default long-term memory).
    stored = MemoryStore.open(catalogued.catalog_path, TierEmbedding(resolve_serving(catalogued.models).embedding))
    assert any("item" in memory.memory for memory in stored.recall(QUESTION, 5, [FAILURE]))


def test_a_rejected_scan_of_an_unchosen_file_is_sent_back(catalogued: Settings, tmp_path: Path) -> None:
    view = LanceCatalogView(Catalog.open(catalogued), resolve_serving(catalogued.models).embedding)
    gold = _gold(view.describe(REVIEWS))
    elsewhere = json.loads(json.dumps(gold))
    elsewhere["plan"]["input"]["input"]["source"]["path"] = str(tmp_path / "reviews.csv")
    model = recorded(
        profiling_choose=[choose(REVIEWS), choose(REVIEWS)],
        planning_outline=[outline("scan", "filter", "aggregate")],
        manipulation_fill=[plan(elsewhere), plan(gold)],
        semantic_judge=accepts(),
    )
    result = semray.ask(QUESTION, settings=catalogued, model=model, dry_run=True)
    grammar = [step for step in result.steps if step.agent == "grammar"]
    assert grammar[0].error is not None and "not a chosen dataset" in grammar[0].error
    assert grammar[1].error is None
