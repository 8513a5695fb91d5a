"""Deployed tiers on a local Ray: `serve up`'s tiers are reused by a query with the same model
profile (no redeploy), refused with a typed error under another one, reported by `serve status`,
probed before `serve up` says ready; replicas that cannot fit fail at once instead of hanging,
and the wait for RUNNING has a deadline."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest
import ray
import structlog.testing
from ray import serve

import semray
from semray.serving.config import ServingConfig, TierConfig
from semray.serving.deployments import start_tiers, stop_tiers
from semray.serving.errors import (
    EndpointError,
    ServingConfigError,
    TierConfigMismatchError,
    TierDeployError,
    TierResourcesError,
)
from semray.serving.lifecycle import serve_down, serve_status, serve_up
from semray.serving.simulator import ModelProfile, SimulatorConfig, TaskSpec
from semray.settings import Settings

pytestmark = pytest.mark.ray
TEXTS = [
    "the battery died after two days and support never answered my emails at all",
    "wonderful screen and a camera that takes lovely pictures in the evening light",
    "arrived late with a cracked case and the charger did not fit the socket either",
    "my daughter loves it and uses the drawing app every single morning before school",
]
TABLE = pa.table({"id": [f"r{i}" for i in range(4)], "review": TEXTS, "good": [False, True, False, True]})


def _simulator() -> SimulatorConfig:
    return SimulatorConfig.from_labels(
        TABLE,
        key_column="id",
        text_columns=["review"],
        tasks=[TaskSpec(name="good", kind="filter", label_column="good", keywords=("positive",))],
        models={"sim-small": ModelProfile(error_rate=0.0), "sim-large": ModelProfile(error_rate=0.0)},
    )


def _config(prefix: str, **tiers: TierConfig) -> ServingConfig:
    return ServingConfig(simulator=_simulator(), app_prefix=prefix, **tiers)


def _replicas(app: str) -> list[str]:
    return sorted(
        entry["name"]
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if entry["name"].startswith(f"SERVE_REPLICA::{app}#")
    )


def _gone(*apps: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(app in serve.status().applications for app in apps) and time.monotonic() < deadline:
        time.sleep(0.5)


@pytest.fixture(scope="module")
def served(ray_settings: Settings) -> Iterator[ServingConfig]:
    config = _config("reuse")
    serve_up(ray_settings, config, ("small", "large"))
    yield config
    serve_down(ray_settings, prefix="reuse")


@pytest.mark.timeout(120)
def test_replicas_that_do_not_fit_fail_at_once_with_the_numbers(ray_settings: Settings) -> None:
    wide = TierConfig(backend="simulated", model="sim-large", num_cpus=1.5)
    start_tiers(_config("fit-a", large=wide), ray_settings, ("large",))
    try:
        started = time.monotonic()
        small = TierConfig(backend="simulated", model="sim-small", num_cpus=1.0)
        with pytest.raises(TierResourcesError) as raised:
            start_tiers(_config("fit-b", small=small), ray_settings, ("small",))
        assert time.monotonic() - started < 30, "no waiting for resources that never come"
        error = raised.value
        print(f"\nTierResourcesError: {error}")
        assert error.resource == "CPU" and error.needed == 1.0 and error.free < 1.0 and error.tiers == ("fit-b-small",)
        assert "fit-a-large (1 running)" in str(error) and "`semray serve down --prefix fit-a`" in str(error)
        assert "fit-b-small" not in serve.status().applications, "nothing was deployed"
    finally:
        stop_tiers("fit-a")


@pytest.mark.timeout(120)
def test_the_wait_for_running_has_a_deadline(ray_settings: Settings) -> None:
    config = _config("slow").model_copy(update={"deploy_timeout_s": 0.05})
    with pytest.raises(TierDeployError) as raised:
        start_tiers(config, ray_settings, ("small",))
    assert (
        raised.value.app == "slow-small"
        and "still" in str(raised.value)
        and "raise deploy_timeout_s" in str(raised.value)
    )
    assert "deleted slow-small" in str(raised.value)
    _gone("slow-small")
    assert "slow-small" not in serve.status().applications


def test_a_query_reuses_serve_ups_tiers_and_another_config_is_refused(
    served: ServingConfig, ray_settings: Settings
) -> None:
    before = {app: _replicas(app) for app in ("reuse-small", "reuse-large")}
    assert all(len(names) == 1 for names in before.values())
    with structlog.testing.capture_logs() as events:
        start_tiers(served, ray_settings, ("small",))
        result = (
            semray.from_arrow(TABLE.select(["id", "review"]), settings=ray_settings)
            .with_serving(served)
            .sem_filter("Is this review positive? {review}", tier="small")
            .execute()
        )
    assert sorted(result.table.column("id").to_pylist()) == ["r1", "r3"]
    assert not [event for event in events if event["event"] == "tier_deployed"], "nothing was redeployed"
    assert any(event["event"] == "tier_already_running" for event in events)
    assert {app: _replicas(app) for app in before} == before, "the same replicas answered"

    other = _config("reuse", small=TierConfig(backend="simulated", model="sim-large"))
    with pytest.raises(TierConfigMismatchError) as raised:
        start_tiers(other, ray_settings, ("small",))
    error = raised.value
    print(f"\nTierConfigMismatchError: {error}")
    assert error.app == "reuse-small" and "simulated:sim-small" in error.deployed and "sim-large" in error.wanted
    assert "deployed by semray serve up" in str(error) and "semray serve down --prefix reuse" in str(error)
    assert _replicas("reuse-small") == before["reuse-small"], "the deployed tier was left alone"


def test_serve_status_reports_what_is_deployed(served: ServingConfig, ray_settings: Settings) -> None:
    status = serve_status(ray_settings, served)
    print("\nserve status:\n" + json.dumps(status, indent=2, default=str))
    assert status["connected"] and status["healthy"] is True and status["problems"] == []
    small = status["deployed"]["reuse-small"]
    assert (small["status"], small["backend"], small["model"], small["replicas"]) == (
        "RUNNING",
        "simulated",
        "sim-small",
        {"RUNNING": 1},
    )
    assert small["matches_profile"] and small["deployed_by"] == "semray serve up"
    other = serve_status(ray_settings, _config("reuse", small=TierConfig(backend="simulated", model="sim-large")))
    assert not other["deployed"]["reuse-small"]["matches_profile"]
    assert other["deployed"]["reuse-large"]["matches_profile"]
    assert any("reuse-small serves another configuration" in problem for problem in other["problems"])


def test_serve_up_fails_when_an_endpoint_is_down(ray_settings: Settings) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again when the block ends: nothing listens there
    down = TierConfig(backend="openai", model="m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    try:
        with pytest.raises(EndpointError) as raised:
            serve_up(ray_settings, _config("dead", small=down), ("small",))
        error = raised.value
        print(f"\n{type(error).__name__}: {error}")
        assert (error.reason, error.attempts, error.status) == ("unreachable", 1, None)
        assert error.url.startswith(f"http://127.0.0.1:{port}/v1") and error.model == "m"
        # Not left pinned on the cluster: a failed `serve up` deletes what it deployed.
        assert "dead-small" not in serve.status().applications
    finally:
        serve_down(ray_settings, prefix="dead")


def test_a_missing_key_variable_fails_before_anything_is_deployed(
    ray_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the Ray this process started the replicas inherit its environment, so an endpoint tier
    whose API-key variable is unset here is refused before deploying: one typed error, instead of
    two failed replica constructors (each a Serve controller stack trace on the console) and then
    a TierDeployError."""
    monkeypatch.delenv("SEMRAY_REUSE_TEST_KEY", raising=False)
    keyed = TierConfig(
        backend="openai", model="m", base_url="http://127.0.0.1:9/v1", api_key_env="SEMRAY_REUSE_TEST_KEY"
    )
    with pytest.raises(ServingConfigError, match=r"SEMRAY_REUSE_TEST_KEY \(the API key of tier 'small'.*export it"):
        start_tiers(_config("keyless", small=keyed), ray_settings, ("small",))
    assert "keyless-small" not in serve.status().applications
