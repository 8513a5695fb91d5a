"""Task recognition, answer formats (bare, JSON fields, reasoning + marker), wrong answers, logprobs."""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
import pytest

from semray.serving.simulator import ChatCompletionRequest, Simulator, SimulatorConfig
from semray.serving.simulator.config import ModelProfile
from semray.serving.simulator.draws import is_wrong, question_key


def _ask(simulator: Simulator, prompt: str, model: str = "sim-large", **extra: Any) -> str:
    request = ChatCompletionRequest(model=model, messages=[{"role": "user", "content": prompt}], **extra)
    return simulator.complete_sync(request).choices[0].message.content


def _row(reviews: pa.Table, index: int) -> dict[str, Any]:
    return reviews.slice(index, 1).to_pylist()[0]


def test_filter_answers_yes_no_or_true_false(simulator: Simulator, reviews: pa.Table) -> None:
    for index in range(6):
        row = _row(reviews, index)
        yes_no = _ask(simulator, f"Is this review positive? Answer yes or no.\n{row['review']}")
        assert yes_no == ("Yes" if row["is_positive"] else "No")
        true_false = _ask(simulator, f"True or false: the buyer is happy.\n{row['review']}")
        assert true_false == str(row["is_positive"])


def test_label_score_free_text_and_extract_bare(simulator: Simulator, reviews: pa.Table) -> None:
    row = _row(reviews, 4)
    assert _ask(simulator, f"What is the sentiment of: {row['review']}") == row["sentiment"]
    assert _ask(simulator, f"How many stars (1-5) would you rate it? {row['review']}") == str(row["stars"])
    assert _ask(simulator, f"Summarize this review. {row['review']}") == row["summary"]
    extracted = json.loads(_ask(simulator, f"Extract the buyer's details from: {row['review']}"))
    assert extracted == {"city": row["city"], "age": row["buyer_age"]}


def test_json_schema_fields_are_filled(simulator: Simulator, reviews: pa.Table) -> None:
    row = _row(reviews, 9)
    schema = {
        "type": "object",
        "properties": {
            "reasoning": {"type": "string"},
            "sentiment": {"type": "string", "enum": ["Negative", "Neutral", "Positive"]},
        },
    }
    content = _ask(
        simulator,
        f"Give the sentiment. {row['review']}",
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
    )
    answer = json.loads(content)
    assert list(answer) == ["reasoning", "sentiment"]
    assert answer["sentiment"] == row["sentiment"].capitalize()  # mapped onto the schema's enum spelling


def test_json_schema_extract_fields_by_name(simulator: Simulator, reviews: pa.Table) -> None:
    row = _row(reviews, 2)
    schema = {
        "type": "object",
        "properties": {"age": {"type": "integer"}, "City": {"type": "string"}, "email": {"type": "string"}},
    }
    content = _ask(
        simulator,
        f"Extract: {row['review']}",
        response_format={"type": "json_schema", "json_schema": {"name": "b", "schema": schema}},
    )
    assert json.loads(content) == {"age": row["buyer_age"], "City": row["city"], "email": None}


def test_json_object_filter_uses_answer_key(simulator: Simulator, reviews: pa.Table) -> None:
    row = _row(reviews, 1)
    content = _ask(simulator, f"Is the review positive? {row['review']}", response_format={"type": "json_object"})
    assert json.loads(content) == {"answer": row["is_positive"]}


def test_reasoning_then_marker(simulator: Simulator, reviews: pa.Table) -> None:
    row = _row(reviews, 3)
    content = _ask(
        simulator,
        f"Think step by step about whether the review is positive, then write 'FINAL ANSWER: yes/no'.\n{row['review']}",
    )
    reasoning, _, answer = content.rpartition("FINAL ANSWER: ")
    assert reasoning.startswith("Reasoning:")
    assert answer == ("Yes" if row["is_positive"] else "No")
    default = _ask(simulator, f"Explain your reasoning: what sentiment does this show? {row['review']}")
    assert default.endswith(f"\nAnswer: {row['sentiment']}")


def test_pair_task_compares_labels(simulator: Simulator, reviews: pa.Table) -> None:
    rows = reviews.to_pylist()
    same = next((a, b) for a in rows for b in rows if a is not b and a["city"] == b["city"])
    different = next((a, b) for a in rows for b in rows if a["city"] != b["city"])
    for (left, right), expected in ((same, "Yes"), (different, "No")):
        prompt = f"Were these two reviews written in the same city?\n1. {left['review']}\n2. {right['review']}"
        assert _ask(simulator, prompt) == expected


def test_answers_do_not_depend_on_prompt_wording(simulator: Simulator, reviews: pa.Table) -> None:
    for index in range(len(reviews)):
        text = _row(reviews, index)["review"]
        first = _ask(simulator, f"Is this review positive? {text}", model="sim-small")
        second = _ask(
            simulator,
            f"Review:\n\n{json.dumps(text)}\n\nWould you call the customer happy? Yes or no.",
            model="sim-small",
        )
        assert first == second


def test_wrong_answers_follow_the_error_hash(simulator: Simulator, reviews: pa.Table) -> None:
    config = simulator.config
    for index in range(len(reviews)):
        row = _row(reviews, index)
        question = question_key(config.seed, "sim-small", "sentiment", [f"reviews:{row['review_id']}"])
        answer = _ask(simulator, f"Sentiment of: {row['review']}", model="sim-small")
        assert (answer != row["sentiment"]) == is_wrong(question, config.models["sim-small"].error_rate)
        assert answer in ("negative", "neutral", "positive")
        stars_question = question_key(config.seed, "sim-small", "stars", [f"reviews:{row['review_id']}"])
        stars = int(_ask(simulator, f"Rate the stars: {row['review']}", model="sim-small"))
        assert 1 <= stars <= 5
        assert (stars != row["stars"]) == is_wrong(stars_question, 0.3)
        if stars != row["stars"]:
            assert abs(stars - row["stars"]) == 1


def test_wrong_extraction_corrupts_one_field(simulator: Simulator, reviews: pa.Table) -> None:
    corrupted = 0
    for index in range(len(reviews)):
        row = _row(reviews, index)
        answer = json.loads(_ask(simulator, f"Extract buyer fields: {row['review']}", model="sim-small"))
        differences = sum(answer[key] != row[column] for key, column in (("city", "city"), ("age", "buyer_age")))
        assert differences <= 1
        corrupted += differences
    assert corrupted > 0


def test_logprobs_carry_confidence_on_the_answer_token(simulator: Simulator, reviews: pa.Table) -> None:
    row = _row(reviews, 0)
    request = ChatCompletionRequest(
        model="sim-small",
        messages=[{"role": "user", "content": f"What is the sentiment? {row['review']}"}],
        logprobs=True,
        top_logprobs=3,
    )
    response = simulator.complete_sync(request)
    tokens = response.choices[0].logprobs.content  # type: ignore[union-attr]
    assert "".join(token.token for token in tokens) == response.choices[0].message.content
    answer = tokens[0]
    assert 1 / 3 < math.exp(answer.logprob) < 1
    assert answer.top_logprobs[0].token == answer.token
    assert len(answer.top_logprobs) == 3
    assert math.isclose(sum(math.exp(top.logprob) for top in answer.top_logprobs), 1.0)
    assert response.system_fingerprint == "semray-simulator"


def test_no_match_is_counted_and_refused_unless_configured_to_answer(
    simulator: Simulator, review_config: SimulatorConfig
) -> None:
    from semray.serving.simulator import NoLabelError

    with pytest.raises(NoLabelError, match="no_match") as refused:
        _ask(simulator, "Is the sky green? Answer yes or no.")
    assert refused.value.reason == "no_match"
    stats = simulator.stats()
    assert (stats.no_match, stats.no_match_rate, stats.no_label) == (1, 1.0, 1)
    assert stats.no_match_samples == ["Is the sky green? Answer yes or no."]
    assert stats.models["sim-large"].calls == 0 and stats.models["sim-large"].prompt_tokens == 0  # not charged
    answering = Simulator(review_config.model_copy(update={"unlabelled": "answer"}))
    assert _ask(answering, "Is the sky green? Answer yes or no.") == "No"  # the old uninformed answer
    assert answering.stats().no_label == 0 and answering.stats().models["sim-large"].calls == 1


def test_over_context_is_rejected(simulator: Simulator, reviews: pa.Table) -> None:
    from semray.serving.simulator import ContextLengthExceededError

    long_prompt = "Is this positive? " + " ".join(reviews.column("review").to_pylist()[:20])
    with pytest.raises(ContextLengthExceededError, match="maximum context length is 400 tokens"):
        _ask(simulator, long_prompt, model="sim-small")
    assert _ask(simulator, long_prompt, model="sim-large") in ("Yes", "No")
    assert simulator.stats().models["sim-small"].rejected == 1


def test_max_tokens_truncates_with_length_reason(simulator: Simulator, reviews: pa.Table) -> None:
    row = _row(reviews, 0)
    request = ChatCompletionRequest(
        model="sim-large", messages=[{"role": "user", "content": f"Extract buyer: {row['review']}"}], max_tokens=3
    )
    response = simulator.complete_sync(request)
    assert response.choices[0].finish_reason == "length"
    assert response.usage.completion_tokens <= 3


def test_usage_prices_and_latency(reviews: pa.Table, review_config: SimulatorConfig) -> None:
    models = {
        "timed": ModelProfile(
            error_rate=0,
            latency_base_s=0.5,
            latency_per_token_s=0.01,
            price_in_per_million=2.0,
            price_out_per_million=8.0,
        )
    }
    simulator = Simulator(review_config.model_copy(update={"models": models}))
    outcome = simulator.answer("timed", f"Is it positive? {_row(reviews, 0)['review']}")
    assert outcome.latency_s == pytest.approx(0.5 + 0.01 * (outcome.prompt_tokens + outcome.completion_tokens))
    assert outcome.cost_usd == pytest.approx((2.0 * outcome.prompt_tokens + 8.0 * outcome.completion_tokens) / 1e6)


def test_real_medical_labels_and_error_rate(medical_dir) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.csv as pa_csv

    config = SimulatorConfig.from_mapping(
        {
            "seed": 4,
            "models": {"m": {"error_rate": 0.2}},
            "datasets": {
                "symptoms": {
                    "path": str(medical_dir / "text_symptoms_data.csv"),
                    "key_column": "symptom_id",
                    "join_column": "patient_id",
                    "text_columns": ["symptoms"],
                    "labels_path": str(medical_dir / "patient_data_with_labels.csv"),
                }
            },
            "tasks": [
                {"name": "diagnosis", "kind": "label", "label_column": "text_diagnosis", "keywords": ["diagnosis"]}
            ],
        }
    )
    simulator = Simulator(config)
    texts = pa_csv.read_csv(medical_dir / "text_symptoms_data.csv")
    labels = pa_csv.read_csv(medical_dir / "patient_data_with_labels.csv")
    truth = dict(zip(labels.column("patient_id").to_pylist(), labels.column("text_diagnosis").to_pylist(), strict=True))
    rows = texts.to_pylist()
    wrong = sum(_ask(simulator, f"Diagnosis? {row['symptoms']}", model="m") != truth[row["patient_id"]] for row in rows)
    # Identical texts of different rows may be answered about either row: allow them on top of the binomial band.
    duplicates = len(rows) - len({row["symptoms"] for row in rows})
    band = 4 * math.sqrt(0.2 * 0.8 / len(rows)) * len(rows)
    assert abs(wrong - 0.2 * len(rows)) <= band + duplicates


def test_stop_sequences_cut_the_completion(simulator: Simulator, reviews: pa.Table) -> None:
    row = _row(reviews, 0)
    prompt = f"Think step by step: what is the sentiment? {row['review']}"
    assert _ask(simulator, prompt, stop=["\n"]).startswith("Reasoning:")
    assert "\n" not in _ask(simulator, prompt, stop="\n")
    assert _ask(simulator, prompt, stop=["Answer:"]).endswith("\n")


def test_building_a_simulator_announces_it(review_config: SimulatorConfig) -> None:
    from structlog.testing import capture_logs

    with capture_logs() as events:
        Simulator(review_config)
    announced = [event for event in events if event["event"] == "simulated_model_tier"]
    assert announced and announced[0]["log_level"] == "warning"
    assert announced[0]["models"] == ["sim-large", "sim-small"]


def test_boolean_spelling_follows_the_prompt(simulator: Simulator, reviews: pa.Table) -> None:
    row = _row(reviews, 0)
    expected = row["is_positive"]
    assert _ask(simulator, f"Positive? Reply TRUE or FALSE.\n{row['review']}") == ("TRUE" if expected else "FALSE")
    assert _ask(simulator, f"Positive (YES/NO)?\n{row['review']}") == ("YES" if expected else "NO")
    assert _ask(simulator, f"Is it positive? It is true, no doubt.\n{row['review']}") == ("Yes" if expected else "No")
