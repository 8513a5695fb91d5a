"""Topic pruning end to end on a local Ray: with ``Settings.topic_pruning`` (``Query.with_topic_pruning``) a
semantic filter on a topic of an organised, catalogued collection asks the model only about the documents
labelled with that topic, gives the same answer where the labels agree with the model, and EXPLAIN shows it.

The simulated tiers answer from the true topic of each note (error rate 0, response cache off), so
``Result.usage.calls`` counts the documents the filter asked about.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_organize import _recording, _topic_folder

from semray.api import Query, read_catalog
from semray.catalog.ingest import add_server
from semray.catalog.organize import organize_dataset, recorded_replies
from semray.operators import Scan
from semray.serving.config import ServingConfig
from semray.serving.simulator.config import ModelProfile, SimulatorConfig, TaskSpec
from semray.settings import Settings

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # an ingest, an organisation and two runs on the simulator

WEATHER = TaskSpec(name="weather", kind="filter", label_column="weather", true_values=("true",), keywords=("weather",))


@pytest.fixture(scope="module")
def notes(ray_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> tuple[Query, list[str]]:
    """The catalogued, organised notes on the simulated tiers, and the ids of the notes about the weather."""
    root = tmp_path_factory.mktemp("topic-pruning-query")
    settings = ray_settings.model_copy(update={"catalog_dir": root / "catalog"})
    folder, truth = _topic_folder(root)
    add_server(settings, str(folder), engine="local")
    organize_dataset(settings, "notes", sample=20, replies=recorded_replies(_recording(truth)))
    query = read_catalog("notes", settings)
    assert isinstance(query.plan, Scan) and query.plan.source.path is not None
    documents = pq.read_table(query.plan.source.path, columns=["document_id", "text"])
    about = ["true" if truth[document] == "Weather" else "false" for document in documents["document_id"].to_pylist()]
    simulator = SimulatorConfig.from_labels(
        documents.append_column("weather", pa.array(about)),
        key_column="document_id",
        text_columns=["text"],
        tasks=(WEATHER,),
        dataset="notes",
        models={"sim-small": ModelProfile(error_rate=0.0), "sim-large": ModelProfile(error_rate=0.0)},
    )
    served = query.with_serving(ServingConfig(simulator=simulator, cache_enabled=False))
    return served, sorted(document for document, topic in truth.items() if topic == "Weather")


def test_pruning_asks_only_the_labelled_documents_for_the_same_answer(notes: tuple[Query, list[str]]) -> None:
    source, weather = notes
    query = source.sem_filter("{text} is about the weather")
    pruned_query = query.with_topic_pruning()
    assert not query.settings.topic_pruning and pruned_query.settings.topic_pruning

    full = query.execute()
    pruned = pruned_query.execute()

    assert sorted(full.table["document_id"].to_pylist()) == weather  # every note asked about: 36 calls
    assert sorted(pruned.table["document_id"].to_pylist()) == weather  # the same answer
    assert full.usage.calls == 36
    assert pruned.usage.calls == len(weather) < full.usage.calls  # only the notes labelled Weather asked about


def test_explain_shows_the_pruning_only_when_asked_for(notes: tuple[Query, list[str]]) -> None:
    source, weather = notes
    query = source.sem_filter("{text} is about the weather")
    pruning = '"document_id" IN (' + ", ".join(f"'{document}'" for document in weather) + ")"
    assert pruning in query.with_topic_pruning().explain()
    assert pruning not in query.explain() and '"document_id" IN' not in query.explain()
    off = query.with_settings(query.settings.model_copy(update={"topic_pruning": True})).with_topic_pruning(False)
    assert '"document_id" IN' not in off.explain()
