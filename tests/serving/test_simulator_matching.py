"""Finding the quoted rows from prompt text alone: escaping, whitespace, truncation, pairs, no match."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pyarrow.csv as pa_csv
import pytest

from semray.serving.simulator import Simulator, SimulatorConfig, TaskSpec
from semray.serving.simulator.config import MatchingConfig
from semray.serving.simulator.matching import ShingleIndex, normalize_words


def test_normalize_words_undoes_escaping() -> None:
    assert normalize_words('I\'ve a "high"\nfever') == ["i", "ve", "a", "high", "fever"]
    assert normalize_words("I\\u0027ve a &quot;high&quot;\\nfever") == ["i", "ve", "a", "high", "fever"]
    assert normalize_words("<p>I&#39;ve a <b>high</b> fever</p>") == ["i", "ve", "a", "high", "fever"]
    assert normalize_words(json.dumps(json.dumps("I've a\nfever"))) == ["i", "ve", "a", "fever"]


def test_match_finds_single_document_and_instruction(simulator: Simulator, reviews) -> None:  # type: ignore[no-untyped-def]
    text = reviews.column("review")[3].as_py()
    match = simulator.match(f"Is this review positive?\nReview: {text}\nAnswer yes or no.")
    assert [row.index for row in match.rows] == [3]
    assert match.instruction_words == ("is", "this", "review", "positive", "review", "answer", "yes", "or", "no")


def test_match_finds_pairs_in_order_of_appearance(simulator: Simulator, reviews) -> None:  # type: ignore[no-untyped-def]
    first, second = reviews.column("review")[7].as_py(), reviews.column("review")[2].as_py()
    match = simulator.match(f"Do these reviews come from the same city?\nA: {first}\nB: {second}")
    assert [row.index for row in match.rows] == [7, 2]


def test_unrelated_prompt_matches_nothing(simulator: Simulator) -> None:
    assert simulator.match("What is the capital of France? Answer in one word.").rows == ()


def test_a_few_shared_words_do_not_match(simulator: Simulator, reviews) -> None:  # type: ignore[no-untyped-def]
    words = reviews.column("review")[5].as_py().split()
    assert simulator.match("Summarize: " + " ".join(words[:5])).rows == ()


def test_quote_of_a_prefix_document_prefers_the_short_one() -> None:
    short = "the patient reports acid reflux and headaches with blurred vision and hunger"
    long = short + " and these symptoms make it very difficult to concentrate at work every day"
    index = ShingleIndex.build([("d", 0, long, "text"), ("d", 1, short, "text")], MatchingConfig())
    assert [row.index for row in index.match(f"Diagnose: {short}").rows] == [1]
    assert [row.index for row in index.match(f"Diagnose: {long}").rows] == [0]


def _variants(text: str) -> dict[str, str]:
    return {
        "whitespace": "  \n\t ".join(text.split()),
        "json": json.dumps(text),
        "json_twice": json.dumps(json.dumps(text)),
        "json_ascii_escapes": json.dumps(text).replace("'", "\\u0027"),
        "html": html.escape(text),
        "html_tags": "<p>" + html.escape(text).replace(", ", ",<br/> ") + "</p>",
    }


@pytest.fixture(scope="module")
def medical_simulator(medical_dir: Path) -> tuple[Simulator, list[str]]:
    config = SimulatorConfig.from_mapping(
        {
            "datasets": {
                "symptoms": {
                    "path": str(medical_dir / "text_symptoms_data.csv"),
                    "key_column": "symptom_id",
                    "text_columns": ["symptoms"],
                    "labels_path": str(medical_dir / "patient_data_with_labels.csv"),
                    "join_column": "patient_id",
                }
            },
            "tasks": [TaskSpec(name="diagnosis", kind="label", label_column="text_diagnosis", keywords=("diagnosis",))],
        }
    )
    texts = pa_csv.read_csv(medical_dir / "text_symptoms_data.csv").column("symptoms").to_pylist()
    return Simulator(config), texts


def test_real_symptom_texts_match_through_escaping_and_whitespace(
    medical_simulator: tuple[Simulator, list[str]],
) -> None:
    simulator, texts = medical_simulator
    failures = []
    for position, text in enumerate(texts[:400]):
        for name, variant in _variants(text).items():
            rows = simulator.match(f"What is the diagnosis?\nSymptoms: {variant}\nAnswer:").rows
            # Identical texts of different rows cannot be told apart; either row is right.
            if len(rows) != 1 or texts[rows[0].index] != text:
                failures.append((position, name, [row.index for row in rows]))
    assert failures == []


def test_real_symptom_texts_match_when_truncated(medical_simulator: tuple[Simulator, list[str]]) -> None:
    simulator, texts = medical_simulator
    wrong = 0
    for text in texts:
        head = text[: len(text) // 2]
        rows = simulator.match(f"What is the diagnosis? {head}").rows
        quoted = " ".join(normalize_words(head)[:-1])  # the last word may be cut mid-way
        # A truncated quote may fit several texts (paraphrases share openings); any that contains it is right.
        if len(rows) != 1 or quoted not in " ".join(normalize_words(texts[rows[0].index])):
            wrong += 1
    assert wrong / len(texts) < 0.01


def test_real_symptom_pairs_match_in_order(medical_simulator: tuple[Simulator, list[str]]) -> None:
    simulator, texts = medical_simulator
    mismatched = 0
    for i in range(0, 400, 2):
        rows = simulator.match(f"Same diagnosis?\nA: {json.dumps(texts[i])}\nB: {html.escape(texts[i + 1])}").rows
        if [texts[row.index] for row in rows] != [texts[i], texts[i + 1]]:
            mismatched += 1
    assert mismatched <= 2  # only pairs of near-identical texts may merge
