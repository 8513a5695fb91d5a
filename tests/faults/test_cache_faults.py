"""Fault corpus for the response cache: a broken cache (garbage, locked, read-only, a folder in
its place) is a miss, logged once, never a failed run; and whatever can change an answer
(backend, model, URL, weights, simulator tables and seed, prompt version, sampling) changes the
key, while nothing else does.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import structlog.testing
from fake_endpoint import (
    CITY,
    FakeEndpoint,
    Reply,
    ask,
    completion,
    generate,
    openai_tier,
)

from semray.serving.backends.base import Call, RawCompletion
from semray.serving.backends.simulated import SimulatedBackend
from semray.serving.cache import ResponseCache
from semray.serving.config import Prices, TierConfig
from semray.serving.contract import ModelRequest, ModelResponse
from semray.serving.identity import path_fingerprint
from semray.serving.simulator import ModelProfile, SimulatorConfig, TaskSpec
from semray.serving.tier import ModelTier

pytestmark = pytest.mark.timeout(30)


# -- 4. cache faults: a broken cache is a miss, logged once, never a failed run ---------------


class CountingBackend:
    """Answers 'Yes' to everything and counts calls."""

    native_json = True

    def __init__(self, identity: str = "counting") -> None:
        self.model = "counting"
        self.context_length: int | None = None
        self.default_prices = Prices()
        self.identity = identity
        self.calls = 0

    async def complete(self, calls: Sequence[Call]) -> list[RawCompletion]:
        self.calls += len(calls)
        return [RawCompletion(text="Yes", token_logprobs=(-0.1,), input_tokens=5, output_tokens=1) for _ in calls]

    async def aclose(self) -> None:
        return None


COUNTING = TierConfig(backend="simulated", model="counting")


def run_twice(cache: ResponseCache, backend: CountingBackend) -> tuple[list[ModelResponse], list[ModelResponse]]:
    tier = ModelTier("small", COUNTING, backend, cache)
    first = asyncio.run(tier.generate([ask(prompt="cache fault one?"), ask(prompt="cache fault two?")]))
    second = asyncio.run(tier.generate([ask(prompt="cache fault one?"), ask(prompt="cache fault three?")]))
    return first, second


def garbage_file(path: Path) -> Callable[[], None]:
    path.write_bytes(b"\x00\x01 this is not an SQLite database \xff" * 200)
    return lambda: None


def directory_in_place(path: Path) -> Callable[[], None]:
    path.mkdir()
    return lambda: None


def parent_is_a_file(path: Path) -> Callable[[], None]:
    path.parent.rmdir()
    path.parent.write_text("a file where the cache folder should be")
    return lambda: None


def locked_rollback_database(path: Path) -> Callable[[], None]:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE other (x)")
    holder.execute("BEGIN EXCLUSIVE")
    return holder.close


def locked_wal_database(path: Path) -> Callable[[], None]:
    ResponseCache(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO responses VALUES ('held', 'm', 0, '{}')")
    return holder.close


def read_only_file(path: Path) -> Callable[[], None]:
    seed = ResponseCache(path)
    seed.close()
    # Leave only the main file (no -wal/-shm), then make it unwritable, even for root.
    sqlite3.connect(path).execute("PRAGMA journal_mode=DELETE").connection.close()
    os.chmod(path, 0o444)
    immutable = os.geteuid() == 0 and subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
    if os.geteuid() == 0 and not immutable:
        pytest.skip("running as root without chattr: a read-only file cannot be made")

    def undo() -> None:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=False)
        os.chmod(path, 0o644)

    return undo


CACHE_FAULTS: dict[str, Callable[[Path], Callable[[], None]]] = {
    "garbage_bytes": garbage_file,
    "directory_in_its_place": directory_in_place,
    "parent_is_a_file": parent_is_a_file,
    "locked_exclusive_rollback_journal": locked_rollback_database,
    "locked_exclusive_wal_writer": locked_wal_database,
    "read_only_file": read_only_file,
}


@pytest.mark.parametrize("name", sorted(CACHE_FAULTS))
def test_a_broken_cache_degrades_to_misses_logged_once(tmp_path: Path, name: str) -> None:
    path = tmp_path / "cache" / "responses.sqlite"
    path.parent.mkdir()
    undo = CACHE_FAULTS[name](path)
    try:
        with structlog.testing.capture_logs() as events:
            cache = ResponseCache(path, timeout_s=0.2)
            backend = CountingBackend()
            first, second = run_twice(cache, backend)
            assert len(cache) >= 0
            cache.close()
    finally:
        undo()
    assert [r.value for r in first + second] == ["Yes"] * 4 and all(r.error is None for r in first + second)
    assert backend.calls == 4, "nothing was served from (or stored in) the broken cache"
    warnings = [event for event in events if event["event"] == "response_cache_unavailable"]
    assert len(warnings) == 1, events
    assert warnings[0]["path"] == str(path.resolve()) and warnings[0]["error"] and warnings[0]["log_level"] == "warning"
    assert cache.failure is not None and not cache.available


@pytest.mark.parametrize(
    "stored",
    ["{not json", json.dumps({"text": "Yes", "value": "Yes", "confidence": 148.0}), "null"],
    ids=["not_json", "confidence_148", "json_null"],
)
def test_an_unreadable_cache_entry_is_a_miss(tmp_path: Path, stored: str) -> None:
    path = tmp_path / "responses.sqlite"
    backend = CountingBackend()
    tier = ModelTier("small", COUNTING, backend, ResponseCache(path))
    asyncio.run(tier.generate([ask(prompt="entry?")]))
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE responses SET response = ?", (stored,))
    with structlog.testing.capture_logs() as events:
        (again,) = asyncio.run(tier.generate([ask(prompt="entry?")]))
    assert again.value == "Yes" and not again.cache_hit and backend.calls == 2
    assert any(event["event"] == "response_cache_entry_unreadable" for event in events)


def test_a_working_cache_still_hits(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "responses.sqlite", timeout_s=0.2)
    backend = CountingBackend()
    _, second = run_twice(cache, backend)
    assert backend.calls == 3 and second[0].cache_hit and cache.available and len(cache) == 3


# -- 5. cache identity: whatever can change an answer changes the key ------------------------

REVIEWS = [
    "the battery died after two days and support never answered my emails at all",
    "wonderful screen and a camera that takes lovely pictures in the evening light",
]


def simulator(
    *, seed: int = 3, error_rate: float = 0.2, good: tuple[bool, bool] = (False, True), latency: float = 0.0
) -> SimulatorConfig:
    table = pa.table({"id": ["a", "b"], "review": REVIEWS, "good": list(good)})
    return SimulatorConfig.from_labels(
        table,
        key_column="id",
        text_columns=["review"],
        tasks=[TaskSpec(name="good", kind="filter", label_column="good", keywords=("positive",))],
        models={
            "sim-small": ModelProfile(error_rate=error_rate, context_length=4096, latency_base_s=latency),
            "sim-large": ModelProfile(error_rate=0.0),
        },
        seed=seed,
    )


def simulated_hit(cache: ResponseCache, first: SimulatorConfig, second: SimulatorConfig) -> bool:
    config = TierConfig(backend="simulated", model="sim-small")
    request = ask(prompt=f"Is this review positive? Answer yes or no.\n\n{REVIEWS[1]}")
    asyncio.run(ModelTier("small", config, SimulatedBackend(config, first), cache).generate([request]))
    (again,) = asyncio.run(ModelTier("small", config, SimulatedBackend(config, second), cache).generate([request]))
    return again.cache_hit


@pytest.mark.parametrize(
    ("changed", "expect_hit"),
    [
        ({}, True),
        ({"seed": 4}, False),
        ({"error_rate": 0.5}, False),
        ({"good": (True, False)}, False),
        ({"latency": 0.001}, True),  # latency changes no answer
    ],
    ids=["identical", "seed", "profile_error_rate", "tables", "latency_only"],
)
def test_simulator_configuration_is_part_of_the_key(tmp_path: Path, changed: dict[str, Any], expect_hit: bool) -> None:
    cache = ResponseCache(tmp_path / "responses.sqlite")
    assert simulated_hit(cache, simulator(), simulator(**changed)) is expect_hit


def test_another_models_profile_does_not_change_the_key(tmp_path: Path) -> None:
    base = simulator()
    other = base.model_copy(update={"models": {**base.models, "sim-large": ModelProfile(error_rate=0.9)}})
    assert simulated_hit(ResponseCache(tmp_path / "responses.sqlite"), base, other)


def openai_hit(cache: ResponseCache, first: TierConfig, second: TierConfig, request: ModelRequest) -> bool:
    generate(first, [request], cache)
    (again,) = generate(second, [request], cache)
    return again.cache_hit


@pytest.mark.parametrize(
    "change",
    ["identical", "model", "base_url", "temperature", "max_tokens", "logprobs", "native_schema", "prompt_version"],
)
def test_endpoint_configuration_and_sampling_are_part_of_the_key(
    tmp_path: Path,
    server: FakeEndpoint,
    other_server: FakeEndpoint,
    change: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server.responder = other_server.responder = lambda body: Reply(body=completion('{"city": "Oslo"}'))
    cache = ResponseCache(tmp_path / "responses.sqlite")
    first = openai_tier(server.url)
    second = first
    request = ask(CITY, prompt="Extract the city: a trip to Oslo")
    asked = request
    if change == "model":
        second = first.model_copy(update={"model": "other-model"})
    elif change == "base_url":
        second = first.model_copy(update={"base_url": other_server.url})
    elif change == "native_schema":
        second = first.model_copy(update={"native_structured_output": False})
    elif change == "temperature":
        asked = request.model_copy(update={"temperature": 0.7})
    elif change == "max_tokens":
        asked = request.model_copy(update={"max_tokens": 100})
    elif change == "logprobs":
        asked = request.model_copy(update={"logprobs": False})
    generate(first, [request], cache)
    if change == "prompt_version":
        monkeypatch.setattr("semray.serving.tier.PROMPT_VERSION", "serving-prompts/test")
    (again,) = generate(second, [asked], cache)
    assert again.error is None and again.value == {"city": "Oslo"}
    assert again.cache_hit is (change == "identical")


def test_backend_kind_is_part_of_the_key(tmp_path: Path, server: FakeEndpoint) -> None:
    cache = ResponseCache(tmp_path / "responses.sqlite")
    request = ask(prompt=f"Is this review positive? Answer yes or no.\n\n{REVIEWS[1]}")
    simulated = TierConfig(backend="simulated", model="sim-small")
    asyncio.run(ModelTier("small", simulated, SimulatedBackend(simulated, simulator()), cache).generate([request]))
    (again,) = generate(openai_tier(server.url).model_copy(update={"model": "sim-small"}), [request], cache)
    assert not again.cache_hit and server.posts == 1


@pytest.mark.parametrize("change", ["identical", "model_path", "weights", "engine_kwargs"])
def test_local_weights_are_part_of_the_key(tmp_path: Path, change: str) -> None:
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"weights v1")
    cache = ResponseCache(tmp_path / "responses.sqlite")
    config = TierConfig(backend="hf", model="local", model_path=weights)
    request = ask(prompt="weights?")
    backend = CountingBackend(identity=f"hf:{path_fingerprint(weights)}")
    asyncio.run(ModelTier("small", config, backend, cache).generate([request]))
    second_config = config
    if change == "model_path":
        moved = tmp_path / "weights-copy"
        moved.mkdir()
        (moved / "model.safetensors").write_bytes(b"weights v1")
        second_config = config.model_copy(update={"model_path": moved})
    elif change == "weights":
        (weights / "model.safetensors").write_bytes(b"weights v2")
    elif change == "engine_kwargs":
        second_config = config.model_copy(update={"engine_kwargs": {"quantization": "awq"}})
    second_backend = CountingBackend(identity=f"hf:{path_fingerprint(weights)}")
    (again,) = asyncio.run(ModelTier("small", second_config, second_backend, cache).generate([request]))
    assert again.cache_hit is (change == "identical")
