"""A semantic filter on a topic of an organised documents dataset is pruned by the stored topic labels."""

from __future__ import annotations

import duckdb
import pytest
from test_organize import PROPOSAL, _recording, _topic_folder

from semray.catalog.ingest import add_server
from semray.catalog.organize import organize_dataset, recorded_replies
from semray.catalog.store import Catalog
from semray.catalog.tables import SEGMENTS
from semray.catalog.topic_pruning import TopicLabels, instruction_topic
from semray.catalog.topics import parse_hierarchy
from semray.cli import build_parser
from semray.cli_ask import _journaled_arguments
from semray.operators import Filter, Scan, Schema, SemFilter, SourceSpec, walk
from semray.operators.relational import CatalogPin
from semray.planner.optimize import optimize_plan
from semray.planner.rules.prune_by_topic import prune_by_topic, topic_predicate
from semray.readers import read_catalog
from semray.settings import Settings

HIERARCHY = parse_hierarchy(PROPOSAL)


@pytest.mark.parametrize(
    ("instruction", "topic"),
    [
        ("{text} is about the weather", "Weather"),
        ("{text} talks about FOOD", "Food"),
        ("{text} is about food, namely fruit", "Food/Fruit"),  # the narrower of a parent and its subtopic
        ("{text} is about bread or the weather", None),  # two topics: no single label to prune by
        ("{text} mentions weathering", None),  # whole words only
        ("{text} is long", None),
    ],
)
def test_the_topic_an_instruction_names(instruction: str, topic: str | None) -> None:
    assert instruction_topic(HIERARCHY, instruction) == topic


@pytest.fixture(scope="module")
def organised(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, CatalogPin]:
    root = tmp_path_factory.mktemp("topic-pruning")
    settings = Settings(state_dir=root / "state")
    folder, truth = _topic_folder(root)
    add_server(settings, str(folder), engine="local")
    organize_dataset(settings, "notes", sample=20, replies=recorded_replies(_recording(truth)))
    scan = read_catalog("notes", settings).plan
    assert isinstance(scan, Scan) and scan.source.catalog is not None
    return settings, scan.source.catalog


def _labelled(settings: Settings, label: str) -> set[str]:
    rows = Catalog.open(settings).rows(SEGMENTS, where=f"level = 'document' AND topic = '{label}'")
    return set(rows.column("document_id").to_pylist())


def test_the_labels_give_the_documents_of_a_topic_and_its_subtopics(organised: tuple[Settings, CatalogPin]) -> None:
    settings, pin = organised
    labels = TopicLabels(settings.catalog_path)
    weather = labels(pin, "{text} is about the weather")
    assert weather is not None and set(weather) == _labelled(settings, "Weather") and len(weather) >= 8
    food = labels(pin, "{text} is about food")
    assert food is not None and set(food) == _labelled(settings, "Food/Fruit") | _labelled(settings, "Food/Bread")
    assert labels(pin, "{text} is long") is None


def test_an_unorganised_version_prunes_nothing(organised: tuple[Settings, CatalogPin]) -> None:
    settings, pin = organised
    before = read_catalog("notes", settings, version=pin.version - 1).plan  # the ingest, before organising
    assert isinstance(before, Scan) and before.source.catalog is not None
    assert TopicLabels(settings.catalog_path)(before.source.catalog, "{text} is about the weather") is None


def test_the_rule_puts_the_labelled_documents_below_the_filter(organised: tuple[Settings, CatalogPin]) -> None:
    settings, _ = organised
    labels = TopicLabels(settings.catalog_path)
    plan = (
        read_catalog("notes", settings).select("text", doc="document_id").sem_filter("{text} is about the weather").plan
    )
    pruned = prune_by_topic(plan, labels)
    assert isinstance(pruned, SemFilter) and isinstance(pruned.input, Filter)
    assert pruned.instruction == plan.instruction  # type: ignore[attr-defined]  # the filter still decides
    assert prune_by_topic(pruned, labels) == pruned  # pruned once
    scan = read_catalog("notes", settings).plan
    assert isinstance(scan, Scan) and scan.source.path is not None
    kept = duckdb.sql(
        f"SELECT document_id AS doc FROM read_parquet('{scan.source.path}') WHERE {pruned.input.predicate}"
    ).fetchall()
    assert {row[0] for row in kept} == _labelled(settings, "Weather")
    untouched = read_catalog("notes", settings).sem_filter("{text} is long").plan
    assert prune_by_topic(untouched, labels) == untouched


def test_no_labelled_document_keeps_nothing_and_other_inputs_are_left_alone() -> None:
    assert topic_predicate("doc", []) == "FALSE"
    assert topic_predicate("my doc", ["b's.md", "a.md"]) == "\"my doc\" IN ('a.md', 'b''s.md')"
    asked: list[str] = []

    def labels(pin: CatalogPin, instruction: str) -> tuple[str, ...]:
        asked.append(instruction)
        return ("a.md",)

    schema = Schema.of(("document_id", "VARCHAR"), ("text", "VARCHAR"))
    files = Scan(source=SourceSpec(kind="parquet", path="notes.parquet"), source_schema=schema)
    plan = SemFilter(input=files, instruction="{text} is about the weather")
    assert prune_by_topic(plan, labels) == plan and asked == []  # not catalogued: no labels asked for


def test_the_optimizer_prunes_only_when_given_the_labels(organised: tuple[Settings, CatalogPin]) -> None:
    settings, _ = organised
    plan = read_catalog("notes", settings).sem_filter("{text} is about the weather").plan
    pruned = optimize_plan(plan, topic_labels=TopicLabels(settings.catalog_path))
    filters = [node for node in walk(pruned.plan) if isinstance(node, Filter)]
    assert len(filters) == 1 and filters[0].predicate.startswith('"document_id" IN (')
    assert pruned.written == plan  # the plan as written stays unpruned in the Optimization
    assert not any(isinstance(node, Filter) for node in walk(optimize_plan(plan).plan))  # default: no pruning


def test_topic_pruning_is_off_by_default_and_set_by_env_query_and_ask(
    organised: tuple[Settings, CatalogPin], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, _ = organised
    assert Settings().topic_pruning is False
    monkeypatch.setenv("SEMRAY_TOPIC_PRUNING", "1")
    assert Settings().topic_pruning is True
    query = read_catalog("notes", settings)
    assert query.with_topic_pruning().settings.topic_pruning and not query.settings.topic_pruning
    args = build_parser().parse_args(["ask", "which notes are about the weather?", "--topic-pruning"])
    assert args.topic_pruning is True and _journaled_arguments(args)["topic_pruning"] is True  # kept for --resume
    assert build_parser().parse_args(["ask", "q"]).topic_pruning is False
