"""Tier profiles from the serving config, and token counts equal to what the simulator bills."""

from __future__ import annotations

import asyncio
import math

import pyarrow as pa
import pytest

from semray.cost_model.prices import profiles_from_serving
from semray.cost_model.tokens import PromptTokens, count_answer_tokens, expected_output_tokens
from semray.operators import Scan, Schema, SemClassify, SemExtract, SemFilter, SemMap, SourceSpec, parse_fields
from semray.serving.backends.simulated import SimulatedBackend
from semray.serving.config import Prices, ServingConfig, TierConfig
from semray.serving.prompts import render_prompt
from semray.serving.prompts.operators import build_request
from semray.serving.simulator import ModelProfile, SimulatorConfig, TaskSpec
from semray.serving.tier import ModelTier

SCAN = Scan(
    source=SourceSpec(kind="csv", path="r.csv"), source_schema=Schema.of(("id", "VARCHAR"), ("review", "VARCHAR"))
)
TEXTS = [
    "the battery died after two days and support never answered my emails at all",
    "wonderful screen and a camera that takes lovely pictures in the evening light",
    "arrived late, box crushed, but the kettle itself works and boils water quickly enough",
]


def test_profiles_read_simulator_prices_and_configured_overrides() -> None:
    profiles = profiles_from_serving(ServingConfig())
    assert (profiles["small"].fee_in_per_m, profiles["small"].fee_out_per_m) == (0.1, 0.4)
    assert profiles["large"].fee_in_per_m == 2.5 and math.isinf(profiles["large"].tokens_per_s)
    priced = ServingConfig(
        small=TierConfig(backend="simulated", model="sim-small", prices=Prices(input_per_million=7.0))
    )
    assert profiles_from_serving(priced)["small"].fee_in_per_m == 7.0


def test_a_gpu_tier_charges_gpu_seconds_per_token() -> None:
    vllm = TierConfig(backend="vllm", model="m", num_gpus=1, max_ongoing_requests=32, prices=Prices(gpu_hour=3.6))
    profile = profiles_from_serving(ServingConfig(large=vllm))["large"]
    assert profile.gpu_seconds_per_1k_tokens == pytest.approx(1000 / (4000 * 32))
    assert profile.dollars(0, 0, gpu_seconds=1000) == pytest.approx(1.0)


def test_a_slow_simulated_model_has_its_latency() -> None:
    slow = SimulatorConfig(
        models={"sim-large": ModelProfile(latency_base_s=0.2, latency_per_token_s=0.001, max_concurrency=2)}
    )
    profile = profiles_from_serving(ServingConfig(simulator=slow))["large"]
    assert (profile.tokens_per_s, profile.latency_per_call_s, profile.concurrency) == (1000.0, 0.2, 2)
    assert profile.call_seconds(100) == pytest.approx(0.3)


def _billed(node: SemFilter | SemClassify, kind: str, choices: tuple[str, ...] = ()) -> list[tuple[int, int]]:
    table = pa.table(
        {
            "id": ["a", "b", "c"],
            "review": TEXTS,
            "good": [False, True, True],
            "topic": ["battery", "screen", "delivery"],
        }
    )
    config = SimulatorConfig.from_labels(
        table,
        key_column="id",
        text_columns=["review"],
        tasks=[
            TaskSpec(name="good", kind="filter", label_column="good", keywords=("positive",)),
            TaskSpec(name="topic", kind="label", label_column="topic", keywords=("topic",)),
        ],
    )
    tier_config = TierConfig(backend="simulated", model="sim-large")
    tier = ModelTier("large", tier_config, SimulatedBackend(tier_config, config))
    requests = [
        build_request(kind, render_prompt(node.instruction, row).text, request_id=row["id"], choices=choices)  # type: ignore[arg-type]
        for row in table.to_pylist()
    ]
    responses = asyncio.run(tier.generate(requests))
    return [(r.usage.input_tokens, r.usage.output_tokens) for r in responses]


def test_prompt_tokens_equal_the_simulators_billed_prompt_tokens() -> None:
    counter = PromptTokens()
    rows = [{"id": key, "review": text} for key, text in zip("abc", TEXTS, strict=True)]
    node = SemFilter(input=SCAN, instruction="Is this review positive? {review}")
    billed = _billed(node, "filter")
    assert [counter.count(node, row) for row in rows] == [prompt for prompt, _ in billed]
    assert all(completion == expected_output_tokens(node) for _, completion in billed)
    labels = ("battery", "screen", "delivery")
    classify = SemClassify(input=SCAN, instruction="The topic of {review}", labels=labels)
    billed = _billed(classify, "classify", labels)  # type: ignore[arg-type]
    assert [counter.count(classify, row) for row in rows] == [prompt for prompt, _ in billed]


def test_expected_output_tokens_per_kind() -> None:
    score = SemMap(input=SCAN, instruction="rate {review}", output="s", output_type="int", lo=1, hi=5)
    extract = SemExtract(input=SCAN, instruction="from {review}", fields=parse_fields("product, price: float"))
    text = SemMap(input=SCAN, instruction="summarise {review}", output="summary")
    assert expected_output_tokens(score) == 1.0
    assert expected_output_tokens(extract) > 8
    assert expected_output_tokens(text) == 32.0
    assert count_answer_tokens([True, "screen", {"a": 1}]).tolist() == [1.0, 1.0, 7.0]
