"""The simulator answers only rows it has labels for: anything else is a typed, unpaid ``no_label``.

In-process (``NoLabelError``), through the simulated backend and the tier (per-row error
``no_label``, no tokens, no dollars, no call), and over HTTP (422, code ``no_label``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from semray.serving.backends.simulated import SimulatedBackend
from semray.serving.config import TierConfig
from semray.serving.contract import ModelRequest
from semray.serving.prompts.operators import build_request
from semray.serving.simulator import ChatCompletionRequest, NoLabelError, Simulator, SimulatorConfig, TaskSpec
from semray.serving.simulator.config import ModelProfile
from semray.serving.simulator.server import build_app
from semray.serving.tier import ModelTier

TEXTS = (
    "the parcel from the courier came two weeks late and the box was crushed flat",
    "the blender is loud but it crushes ice in seconds and cleans up easily",
    "support never answered my emails about the broken hinge on the laptop lid",
)


def half_labelled() -> SimulatorConfig:
    """Three documents; the second has no labels at all (nulls in every label column)."""
    table = pa.table(
        {
            "id": ["a", "b", "c"],
            "text": list(TEXTS),
            "late": ["yes", None, "no"],
            "topic": ["delivery", None, "support"],
            "stars": [1, None, 2],
        }
    )
    tasks = (
        TaskSpec(name="late", kind="filter", label_column="late", keywords=("late",)),
        TaskSpec(name="topic", kind="label", label_column="topic", keywords=("topic",)),
        TaskSpec(name="stars", kind="score", label_column="stars", keywords=("stars",), score_range=(1, 5)),
        TaskSpec(name="facts", kind="extract", fields={"topic": "topic", "stars": "stars"}, keywords=("extract",)),
    )
    models = {"sim-large": ModelProfile(error_rate=0.0, price_in_per_million=1.0, price_out_per_million=1.0)}
    return SimulatorConfig.from_labels(
        table, key_column="id", text_columns=["text"], tasks=tasks, dataset="notes", models=models
    )


def ask(simulator: Simulator, prompt: str) -> str:
    request = ChatCompletionRequest(model="sim-large", messages=[{"role": "user", "content": prompt}])
    return simulator.complete_sync(request).choices[0].message.content


@pytest.mark.parametrize(
    ("instruction", "labelled"),
    [("Was it late? Answer yes or no.", "Yes"), ("Which topic is it?", "delivery"), ("How many stars?", "1")],
)
def test_a_null_label_is_refused_where_a_label_is_answered(instruction: str, labelled: str) -> None:
    simulator = Simulator(half_labelled())
    assert ask(simulator, f"{instruction}\n{TEXTS[0]}") == labelled
    with pytest.raises(NoLabelError) as refused:
        ask(simulator, f"{instruction}\n{TEXTS[1]}")
    assert refused.value.reason == "null_label" and "notes:b" in str(refused.value)
    assert simulator.stats().no_label == 1


def test_an_extraction_answers_null_fields_with_nulls() -> None:
    simulator = Simulator(half_labelled())
    assert '"delivery"' in ask(simulator, f"Extract the facts: {TEXTS[0]}")
    assert ask(simulator, f"Extract the facts: {TEXTS[1]}") == '{"topic": null, "stars": null}'


def test_no_task_is_refused() -> None:
    simulator = Simulator(half_labelled())
    with pytest.raises(NoLabelError) as refused:
        ask(simulator, f"Translate this into French: {TEXTS[2]}")
    assert refused.value.reason == "no_task" and simulator.stats().no_task == 1


def test_the_error_pickles_with_its_reason() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(NoLabelError("no_match", "it quotes no row")))
    assert (type(error), error.reason) == (NoLabelError, "no_match") and "answers only rows" in str(error)


def tier() -> ModelTier:
    config = TierConfig(backend="simulated", model="sim-large")
    return ModelTier("large", config, SimulatedBackend(config, Simulator(half_labelled())))


def generate(requests: list[ModelRequest]) -> list[Any]:
    return asyncio.run(tier().generate(requests))


def test_the_tier_charges_nothing_for_rows_without_labels() -> None:
    """The 600-calls-for-300-rows bug: an unmatched prompt got a fixed answer that failed strict
    parsing, so the tier paid a repair re-ask for it. Now it is one unpaid no_label row."""
    prompts = [f"Review: {TEXTS[0]}", "Review: a text the simulator has never seen, about a phone"]
    requests = [
        build_request("classify", f"Which topic is it? {text}", request_id=f"r{i}", choices=("delivery", "support"))
        for i, text in enumerate(prompts)
    ]
    labelled, unlabelled = generate(requests)
    assert labelled.value == "delivery" and labelled.calls == 1 and labelled.usage.input_tokens > 0
    assert unlabelled.error_code == "no_label" and unlabelled.value is None
    assert (unlabelled.calls, unlabelled.usage.input_tokens, unlabelled.usage.output_tokens) == (0, 0, 0)
    assert unlabelled.usage.dollars == 0.0 and not unlabelled.repaired


def test_http_answers_422_no_label_and_charges_nothing() -> None:
    client = TestClient(build_app(Simulator(half_labelled())))
    body = {"model": "sim-large", "messages": [{"role": "user", "content": "Is the sky green? Answer yes or no."}]}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("no_label", "no_match") and "answers only rows" in error["message"]
    stats = client.get("/stats").json()
    assert stats["no_label"] == 1 and stats["models"]["sim-large"]["calls"] == 0
    assert stats["models"]["sim-large"]["cost_usd"] == 0.0
