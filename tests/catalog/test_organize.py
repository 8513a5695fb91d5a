"""Semantic organization: topics proposed and labelled from recorded replies, a classifier assigns the rest,
published as a catalog version; strict parsing of the replies; refusal with only simulated tiers."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from semray.catalog.ingest import add_server, drop
from semray.catalog.organize import PROPOSE_ID, organization, organize_dataset, recorded_replies, topics
from semray.catalog.search import search_segments
from semray.catalog.store import Catalog
from semray.catalog.topics import TopicHierarchy, TopicReplyError, parse_hierarchy, parse_label, topic_where
from semray.cli import main
from semray.errors import CatalogError, OrganizationNeedsModelError
from semray.settings import Settings

SHARED_MEDICAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "medical"

WORDS = {
    "Food/Fruit": ["apple", "banana", "mango", "orchard", "ripe", "juicy", "peel", "citrus"],
    "Food/Bread": ["flour", "yeast", "oven", "baker", "loaf", "dough", "crust", "rye"],
    "Weather": ["rain", "storm", "cloud", "thunder", "forecast", "wind", "humidity", "snow"],
}
PROPOSAL = {
    "topics": [
        {
            "name": "Food",
            "description": "What people eat.",
            "subtopics": [
                {"name": "Fruit", "description": "Fruit and orchards."},
                {"name": "Bread", "description": "Baking bread."},
            ],
        },
        {"name": "Weather", "description": "Rain, wind and forecasts.", "subtopics": []},
    ]
}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path / "state")


def _topic_folder(root: Path, per_topic: int = 12) -> tuple[Path, dict[str, str]]:
    """Markdown documents of three topics (distinct vocabularies); document id -> true topic path."""
    folder = root / "notes"
    folder.mkdir()
    rng = random.Random(7)
    truth: dict[str, str] = {}
    for topic, words in WORDS.items():
        for number in range(per_topic):
            name = f"{topic.replace('/', '-').lower()}-{number:02d}.md"
            body = " ".join(rng.choice(words) for _ in range(40))
            (folder / name).write_text(f"# Note {number}\n\n{body}.\n\n## More\n\n{' '.join(rng.sample(words, 5))}.\n")
            truth[name] = topic
    return folder, truth


def _recording(truth: dict[str, str], proposal: object = PROPOSAL) -> dict[str, str]:
    recording = {f"label:{document}": topic for document, topic in truth.items()}
    recording[PROPOSE_ID] = json.dumps(proposal)
    return recording


def test_topics_are_proposed_labelled_classified_and_published(
    tmp_path: Path, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, truth = _topic_folder(tmp_path)
    before = add_server(settings, str(folder), engine="local").version
    organized = organize_dataset(settings, "notes", sample=20, replies=recorded_replies(_recording(truth)))

    assert organized.version == before + 1
    assert (organized.sample_documents, organized.labelled_documents, organized.held_out_documents) == (20, 20, 4)
    assert organized.agreement is not None and organized.agreement >= 0.75
    catalog = Catalog.open(settings)
    assert topics(catalog, "notes") == {"Food/Bread": 12, "Food/Fruit": 12, "Weather": 12}
    assignments = catalog.rows("segments", where="dataset = 'notes'", columns=["document_id", "topic"]).to_pylist()
    assert all(row["topic"] is not None for row in assignments)
    wrong = [row for row in assignments if row["topic"] != truth[row["document_id"]]]
    assert len(wrong) <= len(assignments) // 10

    stored = organization(catalog, "notes")
    assert stored is not None and stored.agreement == organized.agreement
    food = topic_where(stored.hierarchy, "Food")
    vector = np.asarray(catalog.rows("segments", columns=["vector"]).column("vector")[0].as_py(), dtype=np.float32)
    hits = search_segments(catalog.table("segments"), "rain storm", vector, k=50, mode="hybrid", where=food)
    assert hits and all(truth[hit.document_id].startswith("Food/") for hit in hits)

    pinned = Catalog.open(settings, version=before)
    assert topics(pinned, "notes") == {} and organization(pinned, "notes") is None

    assert main(["--state-dir", str(settings.state_dir), "catalog", "show", "notes"]) == 0
    shown = capsys.readouterr().out
    assert "classifier agreement with the model on 4 held-out documents" in shown and "Food/Bread" in shown

    drop(settings, "notes")
    assert Catalog.open(settings).rows("organizations").num_rows == 0


def test_a_re_ingest_drops_the_topics_and_show_says_the_organization_is_stale(
    tmp_path: Path, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, truth = _topic_folder(tmp_path, per_topic=4)
    add_server(settings, str(folder), engine="local")
    organize_dataset(settings, "notes", sample=12, replies=recorded_replies(_recording(truth)))
    (folder / "weather-00.md").write_text("# Changed\n\nSnow and wind all week.\n")
    from semray.catalog.ingest import refresh

    refresh(settings, "notes", engine="local")
    catalog = Catalog.open(settings)
    assert sum(topics(catalog, "notes").values()) == 11  # the re-read document has no topic
    assert main(["--state-dir", str(settings.state_dir), "catalog", "show", "notes", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["organization"]["stale"] is True


def test_simulated_tiers_refuse_to_organize(
    tmp_path: Path, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _truth = _topic_folder(tmp_path, per_topic=2)
    add_server(settings, str(folder), engine="local")
    with pytest.raises(OrganizationNeedsModelError, match="cannot propose topics"):
        organize_dataset(settings, "notes")
    assert main(["--state-dir", str(settings.state_dir), "catalog", "organize", "notes"]) == 2
    assert "needs a real LLM tier" in capsys.readouterr().err


def test_organize_replays_a_recording_from_the_command_line(
    tmp_path: Path, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, truth = _topic_folder(tmp_path, per_topic=4)
    add_server(settings, str(folder), engine="local")
    recording = tmp_path / "replies.json"
    recording.write_text(json.dumps(_recording(truth)))
    state = ["--state-dir", str(settings.state_dir)]
    assert main([*state, "catalog", "organize", "notes", "--sample", "10", "--replay", str(recording)]) == 0
    out = capsys.readouterr().out
    assert "3 topics over 12 documents" in out and "on 10 of 10 sampled documents" in out


def test_labels_that_do_not_parse_leave_documents_unlabelled_and_too_few_refuse(
    tmp_path: Path, settings: Settings
) -> None:
    folder, truth = _topic_folder(tmp_path, per_topic=4)
    add_server(settings, str(folder), engine="local")
    recording = _recording(truth)
    for document in list(truth)[:6]:
        recording[f"label:{document}"] = "Sports"  # not a topic path
    organized = organize_dataset(settings, "notes", sample=12, replies=recorded_replies(recording))
    assert (organized.sample_documents, organized.labelled_documents) == (12, 6)
    assert sum(topics(Catalog.open(settings), "notes").values()) == 12
    with pytest.raises(CatalogError, match="only 0 of 12 sampled documents"):
        organize_dataset(settings, "notes", sample=12, replies=recorded_replies({PROPOSE_ID: json.dumps(PROPOSAL)}))


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("topics: a, b", "not JSON"),
        ({"topics": [{"name": "A", "description": "d"}]}, "does not match its schema"),
        ({"topics": [{"name": "A", "description": "d", "subtopics": []}], "extra": 1}, "does not match its schema"),
        ({"topics": [{"name": "A", "description": "d", "subtopics": []}]}, "1 topics; 2 to"),
        (
            {"topics": [{"name": n, "description": "d", "subtopics": []} for n in ("A", "a")]},
            "the name 'a' repeats",
        ),
        ({"topics": [{"name": n, "description": "d", "subtopics": []} for n in ("A", "B/C")]}, "contains '/'"),
    ],
)
def test_a_proposal_is_parsed_strictly(reply: object, message: str) -> None:
    with pytest.raises(TopicReplyError, match=message):
        parse_hierarchy(reply if isinstance(reply, str) else json.dumps(reply))


def test_a_label_must_be_one_of_the_paths() -> None:
    hierarchy = parse_hierarchy(json.dumps(PROPOSAL))
    assert hierarchy.labels == ("Food/Fruit", "Food/Bread", "Weather")
    assert parse_label(' "food/bread" ', hierarchy) == "Food/Bread"
    for reply in ("Food", "Bread", "Weather, I think"):
        with pytest.raises(TopicReplyError):
            parse_label(reply, hierarchy)
    with pytest.raises(CatalogError, match="did you mean 'Weather'"):
        topic_where(hierarchy, "Wether")
    assert topic_where(TopicHierarchy.from_json(PROPOSAL["topics"]), "Weather") == "\"topic\" IN ('Weather')"  # type: ignore[arg-type]


@pytest.mark.skipif(not (SHARED_MEDICAL / "text_symptoms_data.csv").is_file(), reason="shared medical data absent")
def test_the_classifier_agrees_with_the_model_on_the_medical_diagnoses(tmp_path: Path, settings: Settings) -> None:
    """24 diagnoses, 10 texts each (written to a temporary folder for the ingest); the model's labels are the
    true diagnoses (recorded replies), so agreement on held-out documents measures the embedding classifier."""
    import pyarrow.csv as pa_csv

    texts = pa_csv.read_csv(SHARED_MEDICAL / "text_symptoms_data.csv")
    labels = pa_csv.read_csv(SHARED_MEDICAL / "patient_data_with_labels.csv").select(["patient_id", "text_diagnosis"])
    joined = texts.join(labels, "patient_id").sort_by("symptom_id").to_pylist()
    folder = tmp_path / "symptoms"
    folder.mkdir()
    truth: dict[str, str] = {}
    taken: dict[str, int] = {}
    for row in joined:
        diagnosis = row["text_diagnosis"]
        if taken.get(diagnosis, 0) >= 10:
            continue
        taken[diagnosis] = taken.get(diagnosis, 0) + 1
        name = f"{row['symptom_id']}.txt"
        (folder / name).write_text(row["symptoms"] + "\n")
        truth[name] = diagnosis
    assert len(taken) == 24
    proposal = {"topics": [{"name": name, "description": name, "subtopics": []} for name in sorted(taken)]}
    add_server(settings, str(folder), engine="local")
    organized = organize_dataset(
        settings, "symptoms", sample=240, replies=recorded_replies(_recording(truth, proposal))
    )
    assert organized.held_out_documents == 48
    assert organized.agreement is not None and organized.agreement >= 0.5  # chance: 1/24
