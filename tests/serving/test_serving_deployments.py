"""The tiers as Ray Serve apps on a local Ray: generate, embed, pickled handles, idempotent start,
and a replica killed mid-batch (the batch is retried, usage counted once)."""

from __future__ import annotations

import asyncio
import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import ray
import structlog.testing

from semray.serving.config import ServingConfig
from semray.serving.contract import ModelRequest, OutputConstraint
from semray.serving.deployments import TierHandles, start_tiers, stop_tiers, tier_status
from semray.serving.lifecycle import serve_down, serve_status
from semray.serving.simulator import ModelProfile, SimulatorConfig, TaskSpec
from semray.serving.usage import UsageLedger
from semray.settings import Settings

pytestmark = pytest.mark.ray
YES_NO = OutputConstraint.choice("Yes", "No")
TEXTS = [
    "the battery died after two days and support never answered my emails at all",
    "wonderful screen and a camera that takes lovely pictures in the evening light",
    "arrived late with a cracked case and the charger did not fit the socket either",
    "my daughter loves it and uses the drawing app every single morning before school",
]
GOOD = [False, True, False, True]


def _simulator(large_latency_s: float = 1.0) -> SimulatorConfig:
    table = pa.table({"id": [f"r{i}" for i in range(len(TEXTS))], "review": TEXTS, "good": GOOD})
    return SimulatorConfig.from_labels(
        table,
        key_column="id",
        text_columns=["review"],
        tasks=[TaskSpec(name="good", kind="filter", label_column="good", keywords=("positive",))],
        models={
            "sim-small": ModelProfile(error_rate=0.0, price_in_per_million=1.0),
            "sim-large": ModelProfile(error_rate=0.0, latency_base_s=large_latency_s),
        },
    )


def _requests() -> list[ModelRequest]:
    return [
        ModelRequest(
            prompt=f"Is this review positive? Answer yes or no.\n\n{text}", constraint=YES_NO, request_id=str(i)
        )
        for i, text in enumerate(TEXTS)
    ]


@pytest.fixture(scope="module")
def handles(ray_settings: Settings) -> Iterator[TierHandles]:
    config = ServingConfig(simulator=_simulator(), app_prefix="semray-test")
    yield start_tiers(config, ray_settings)
    stop_tiers("semray-test")


def test_tiers_answer_batches_and_embed(handles: TierHandles, ray_settings: Settings) -> None:
    responses = handles.generate("small", _requests())
    assert [r.value for r in responses] == ["No", "Yes", "No", "Yes"]
    assert [r.request_id for r in responses] == ["0", "1", "2", "3"]
    assert all(r.tier == "small" and r.model == "sim-small" and not r.cache_hit for r in responses)
    awaited = asyncio.run(handles.agenerate("small", _requests()))
    assert [r.value for r in awaited] == ["No", "Yes", "No", "Yes"]
    again = handles.generate("small", _requests())
    assert all(r.cache_hit and r.usage.input_tokens == 0 for r in again), "the durable cache answers repeats"
    assert (ray_settings.state_path / "cache" / "responses.sqlite").exists()

    vectors = handles.embed(TEXTS)
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert set(tier_status("semray-test").values()) == {"RUNNING"}


def test_cpu_model_replicas_sleep_at_openmp_barriers(handles: TierHandles) -> None:
    """The embedder's replica process has OMP_WAIT_POLICY=PASSIVE (set before torch loads); a
    simulated tier's has not (it runs no torch). Replicas found by their process titles (local Ray)."""
    handles.embed(TEXTS)
    policies: dict[str, list[str | None]] = {}
    for proc in Path("/proc").iterdir():
        try:
            title = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "ServeReplica:semray-test-" not in title:
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        tier = title.split("ServeReplica:semray-test-", 1)[1].split(":", 1)[0]
        policy = next((e.decode() for e in environ if e.startswith(b"OMP_WAIT_POLICY=")), None)
        policies.setdefault(tier, []).append(policy)
    assert policies.get("embedding") == ["OMP_WAIT_POLICY=PASSIVE"]
    assert policies.get("small") == [None]


def test_handles_pickle_into_ray_workers_and_restart_is_idempotent(
    handles: TierHandles, ray_settings: Settings
) -> None:
    def call_from_worker(blob: bytes, requests: list[ModelRequest]) -> list[str]:
        remote_handles = pickle.loads(blob)  # as a Ray Data actor constructor receives it
        return [str(r.value) for r in remote_handles.generate("large", requests)]

    task = ray.remote(num_cpus=0)(call_from_worker)
    assert ray.get(task.remote(pickle.dumps(handles), _requests()[:2])) == ["No", "Yes"]
    started = time.perf_counter()
    again = start_tiers(ServingConfig(simulator=_simulator(), app_prefix="semray-test"), ray_settings)
    assert again.apps == handles.apps and time.perf_counter() - started < 20


def test_replica_killed_mid_batch_is_retried_and_counted_once(handles: TierHandles) -> None:
    # The large model takes 1 s per call; max_tokens=17 keeps these prompts out of the cache.
    requests = [request.model_copy(update={"max_tokens": 17}) for request in _requests()]
    killed: list[str] = []
    killer = threading.Timer(0.4, _kill_replica, args=("semray-test-large", killed))
    killer.start()
    with structlog.testing.capture_logs() as events:
        responses = handles.generate("large", requests)
    killer.join()
    assert killed, "a replica of the large tier was found and killed"
    retries = [event for event in events if event["event"] == "tier_batch_retry"]
    assert retries, "the batch was sent again"
    assert "same batch id" in retries[0]["note"], "the retry counts what the dead replica recorded as paid"
    ledger = UsageLedger()
    ledger.record_many("filter", responses)
    total = ledger.summary().total
    assert [r.value for r in responses] == ["No", "Yes", "No", "Yes"]
    assert total.requests == 4 and total.calls == 4 and total.cache_hits == 0
    repeat = handles.generate("large", requests)
    assert all(r.cache_hit for r in repeat), "the retried batch was cached once"
    assert total.input_tokens == sum(r.usage.input_tokens for r in responses) > 0


def test_serve_status_and_down(handles: TierHandles, ray_settings: Settings) -> None:
    config = ServingConfig(simulator=_simulator(), app_prefix="semray-test")
    status = serve_status(ray_settings, config)
    assert status["connected"] and set(status["tiers"].values()) == {"RUNNING"}
    assert status["cache"]["entries"] >= 4 and status["backends"]["small"] == "simulated:sim-small"
    assert serve_down(ray_settings, prefix="semray-test") == sorted(handles.apps.values())
    assert serve_status(ray_settings, config)["tiers"] == {}


def _kill_replica(app: str, killed: list[str]) -> None:
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name = entry["name"]
        if name.startswith("SERVE_REPLICA::") and app in name:
            ray.kill(ray.get_actor(name, namespace=entry["namespace"]), no_restart=False)
            killed.append(name)
            return
