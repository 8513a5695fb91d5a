"""Deciding what to deploy, without Ray: the resource check, the per-tier configuration digest,
reuse versus replace versus a mismatch error, Serve's status read into digests, and the deadline."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from semray.serving import deployments
from semray.serving.capacity import ClusterResources, ReplicaNeed, check_capacity, tier_needs
from semray.serving.config import ServingConfig, TierConfig
from semray.serving.deployed import DeployedApp, deployed_apps, deployment_name, wait_running
from semray.serving.deployments import _plan, tier_digest
from semray.serving.errors import TierConfigMismatchError, TierDeployError, TierResourcesError

TWO_CPUS = ClusterResources(free={"CPU": 2.0, "GPU": 0.0}, total={"CPU": 2.0}, largest_node={"CPU": 2.0})


@pytest.mark.parametrize("name", ["semray.serving.capacity", "semray.serving.deployed", "semray.serving.handles"])
def test_docstring_examples(name: str) -> None:
    assert doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS).failed == 0


def test_default_tiers_fit_two_cpus_and_a_second_large_prefix_does_not() -> None:
    config = ServingConfig()
    apps = {tier: config.app_name(tier) for tier in ("embedding", "small", "large")}
    check_capacity(tier_needs(config, apps), TWO_CPUS)  # 0.3 + 0.2 + 0.2

    big = ServingConfig(app_prefix="b", small=TierConfig(backend="simulated", model="sim-small", num_cpus=1.0))
    held = ClusterResources(
        free={"CPU": 0.5}, total={"CPU": 2.0}, largest_node={"CPU": 2.0}, holders=("a-large (1 running)",)
    )
    with pytest.raises(TierResourcesError) as raised:
        check_capacity(tier_needs(big, {"small": "b-small"}), held)
    error = raised.value
    assert (error.resource, error.needed, error.free, error.total, error.tiers) == ("CPU", 1.0, 0.5, 2.0, ("b-small",))
    message = str(error)
    assert "b-small: 1 replica x 1 CPU" in message and "0.5 of 2 CPU are free" in message
    assert "a-large (1 running)" in message and "`semray serve down --prefix a`" in message
    assert "lower num_cpus" in message and "add nodes" in message


def test_a_replica_larger_than_any_node_or_a_gpu_on_a_cpu_cluster_fails() -> None:
    wide = ServingConfig(large=TierConfig(backend="simulated", model="sim-large", num_cpus=4.0))
    with pytest.raises(TierResourcesError, match="largest node of the Ray cluster has 2 CPU"):
        check_capacity(tier_needs(wide, {"large": "semray-large"}), TWO_CPUS)
    gpu = ServingConfig(large=TierConfig(backend="hf", model="m", model_path=Path("/m"), num_gpus=1.0))
    with pytest.raises(TierResourcesError, match="GPU"):
        check_capacity(tier_needs(gpu, {"large": "semray-large"}), TWO_CPUS)


def test_vllm_engines_count_their_bundles_and_the_client_replica_no_gpu() -> None:
    tier = TierConfig(backend="vllm", model="q", num_gpus=0.5, tensor_parallel_size=2)
    needs = tier_needs(ServingConfig(large=tier), {"large": "semray-large"}, vllm_app="semray-vllm")
    assert [(n.app, n.total("GPU"), n.total("CPU")) for n in needs] == [
        ("semray-large", 0.0, 0.2),
        ("semray-vllm", 1.0, 2.0),
    ]


def test_the_digest_is_per_tier_and_covers_what_the_replica_serves() -> None:
    base = ServingConfig()
    assert tier_digest(base, "small", "/c") == tier_digest(
        ServingConfig(app_prefix="x", handle_retries=5, deploy_timeout_s=9), "small", "/c"
    )
    other_large = ServingConfig(large=TierConfig(backend="simulated", model="sim-small"))
    assert tier_digest(base, "small", "/c") == tier_digest(other_large, "small", "/c"), "other tiers do not count"
    assert tier_digest(base, "large", "/c") != tier_digest(other_large, "large", "/c")
    assert tier_digest(base, "small", "/c") != tier_digest(base, "small", "/elsewhere")
    assert len(tier_digest(base, "small", None)) == 16
    # Through the cluster's cache actor the replicas never open the driver's file: its path does not count.
    assert tier_digest(base, "small", "/c", "actor") == tier_digest(base, "small", "/elsewhere", "actor")
    assert tier_digest(base, "small", "/c", "actor") != tier_digest(base, "small", "/c")


def _state(app: str, digest: str | None, status: str = "RUNNING") -> DeployedApp:
    return DeployedApp(app=app, status=status, tier="small", backend="simulated", digest=digest)


def test_plan_reuses_same_config_waits_for_it_and_redeploys_a_failed_one() -> None:
    config = ServingConfig(app_prefix="p")
    digests = {"small": tier_digest(config, "small", None)}
    apps = {"small": "p-small"}
    assert _plan(config, apps, digests, {}, "job")[0] == {"small"}
    assert _plan(config, apps, digests, {"p-small": _state("p-small", digests["small"])}, "job")[:2] == (set(), [])
    deploying = {"p-small": _state("p-small", digests["small"], "DEPLOYING")}
    assert _plan(config, apps, digests, deploying, "job")[:2] == (set(), ["p-small"])
    failed = {"p-small": _state("p-small", digests["small"], "DEPLOY_FAILED")}
    assert _plan(config, apps, digests, failed, "job")[0] == {"small"}


def test_plan_replaces_only_this_drivers_own_run_tiers(monkeypatch: pytest.MonkeyPatch) -> None:
    config = ServingConfig(app_prefix="p")
    apps, digests = {"small": "p-small"}, {"small": tier_digest(config, "small", None)}
    foreign = {"p-small": _state("p-small", "0123456789abcdef")}
    with pytest.raises(TierConfigMismatchError) as raised:
        _plan(config, apps, digests, foreign, "job")
    error = raised.value
    assert error.app == "p-small" and "0123456789abcdef" in error.deployed and digests["small"] in error.wanted
    assert "semray serve down --prefix p" in str(error) and "app_prefix" in str(error)
    assert "It was left running" in str(error)

    monkeypatch.setitem(deployments._REPLACEABLE, ("job", "p-small"), "0123456789abcdef")
    assert _plan(config, apps, digests, foreign, "job")[0] == {"small"}
    with pytest.raises(TierConfigMismatchError):
        _plan(config, apps, digests, foreign, "another-job")
    unknown = {"p-small": _state("p-small", None)}
    with pytest.raises(TierConfigMismatchError, match="does not recognise"):
        _plan(config, apps, digests, unknown, "job")


def _status(apps: dict[str, tuple[str, str, dict[str, int], str]]) -> Any:
    def overview(status: str, name: str, replicas: dict[str, int], message: str) -> Any:
        deployment = SimpleNamespace(message=message, replica_states=replicas)
        return SimpleNamespace(status=status, message="", deployments={name: deployment})

    return SimpleNamespace(applications={app: overview(*spec) for app, spec in apps.items()})


def test_digests_are_read_from_serve_status_and_the_wait_has_a_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    name = deployment_name("small", "simulated", "0123456789abcdef")
    waiting = "Resources required for each replica: {'CPU': 1.0}, total resources available: {'CPU': 0.5}."
    status = _status({"p-small": ("DEPLOYING", name, {"STARTING": 1}, waiting), "other": ("RUNNING", "x", {}, "")})
    deleted: list[str] = []
    monkeypatch.setattr("semray.serving.deployed.serve.status", lambda: status)
    monkeypatch.setattr("semray.serving.deployed.serve.delete", lambda app, _blocking=True: deleted.append(app))
    found = deployed_apps("p")
    assert list(found) == ["p-small"]
    assert (found["p-small"].digest, found["p-small"].replicas, found["p-small"].healthy) == (
        "0123456789abcdef",
        {"STARTING": 1},
        False,
    )
    with pytest.raises(TierDeployError) as raised:
        wait_running(["p-small"], 0.05, owned=["p-small"], poll_s=0.01)
    assert raised.value.app == "p-small" and raised.value.status == "DEPLOYING"
    assert "still DEPLOYING after 0.05 s" in str(raised.value) and "total resources available" in str(raised.value)
    assert deleted == ["p-small"] and "deleted p-small" in str(raised.value)


def test_a_failed_deployment_raises_at_once_with_the_replicas_error(monkeypatch: pytest.MonkeyPatch) -> None:
    name = deployment_name("large", "hf", "0123456789abcdef")
    trace = "The deployment failed to start 2 times in a row.\nTraceback ...\nServingConfigError: no model at /m"
    failed = _status({"p-large": ("DEPLOY_FAILED", name, {}, trace)})
    monkeypatch.setattr("semray.serving.deployed.serve.status", lambda: failed)
    with pytest.raises(TierDeployError, match=r"failed to deploy: The deployment failed .* no model at /m"):
        wait_running(["p-large"], 60.0, poll_s=0.01)


def test_capacity_need_totals() -> None:
    need = ReplicaNeed(app="a", tier="small", replicas=3, per_replica={"CPU": 0.25})
    assert need.total("CPU") == 0.75 and need.total("GPU") == 0.0
