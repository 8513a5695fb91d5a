"""``semray serve plan``: GPU placement of a model profile, checked without Ray or vLLM (issue 24)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semray.cli import main
from semray.serving.config import ServingConfig, TierConfig
from semray.serving.placement import (
    Placement,
    PlacementError,
    nodes_from_ray,
    parse_nodes,
    plan_placement,
    serve_configs,
)
from semray.serving.profiles import load_profile

PROFILES = Path(__file__).parents[2] / "deploy" / "profiles"


def _invariants(placement: Placement, config: ServingConfig) -> None:
    """No GPU holds more than itself, no node more CPUs than it has, every tensor-parallel group on one node."""
    per_gpu: dict[tuple[str, int], float] = defaultdict(float)
    per_node: dict[str, float] = defaultdict(float)
    groups: dict[tuple[str, int], set[str]] = defaultdict(set)
    for worker in placement.workers:
        per_node[worker.node] += worker.cpus
        if worker.gpu >= 0:
            per_gpu[(worker.node, worker.gpu)] += worker.gpus
        if worker.role != "replica" and config.tier(worker.tier).tensor_parallel_size > 1:
            groups[(worker.tier, worker.replica)].add(worker.node)
    shapes = {node.name: node for node in placement.nodes}
    assert all(share <= 1.0 + 1e-9 for share in per_gpu.values()), per_gpu
    assert all(gpu < shapes[node].gpus for node, gpu in per_gpu)
    assert all(cpus <= shapes[node].cpus + 1e-9 for node, cpus in per_node.items())
    stages = {
        name: int(config.tier(name).engine_kwargs.get("pipeline_parallel_size", 1)) for name in ("small", "large")
    }
    assert all(len(nodes) <= stages[tier] for (tier, _), nodes in groups.items()), groups


def test_the_single_node_profile_fits_eight_h200_with_its_autoscaling_headroom() -> None:
    config = load_profile(PROFILES / "h200-1node.toml")
    placement = plan_placement(config, parse_nodes(["8xH200:128"]))
    _invariants(placement, config)
    assert placement.unplaced == () and placement.gpus_used == 7.5
    large = {(worker.replica, worker.gpu) for worker in placement.workers if worker.tier == "large" and worker.gpu >= 0}
    assert len(large) == 6  # 3 replicas x tensor-parallel 2, each on its own GPUs
    smalls = [worker for worker in placement.workers if worker.tier == "small" and worker.gpu >= 0]
    assert len(smalls) == 2 and len({worker.gpu for worker in smalls}) == 1  # two halves share one GPU


def test_the_four_node_profile_keeps_each_405b_replica_on_one_node() -> None:
    config = load_profile(PROFILES / "h200-4nodes.toml")
    placement = plan_placement(config, parse_nodes(["4*8xH200:128"]))
    _invariants(placement, config)
    assert placement.unplaced == ()
    nodes_by_replica = defaultdict(set)
    for worker in placement.workers:
        if worker.tier == "large" and worker.gpu >= 0:
            nodes_by_replica[worker.replica].add(worker.node)
    assert sorted(len(nodes) for nodes in nodes_by_replica.values()) == [1, 1, 1] and len(nodes_by_replica) == 3
    # On two nodes only the minimum fits: the autoscaling replicas are reported, not an error.
    smaller = plan_placement(config, parse_nodes(["2*8xH200:128"]))
    assert any("large replica 3" in item for item in smaller.unplaced)
    assert any("autoscaling" in warning for warning in smaller.warnings)


def _vllm(**fields: object) -> ServingConfig:
    return ServingConfig(
        large=TierConfig.model_validate({"backend": "vllm", "model": "m", "accelerator_type": "H200", **fields})
    )


def test_what_cannot_be_placed_is_refused_with_what_to_change() -> None:
    with pytest.raises(PlacementError, match=r"largest node has 8 GPUs.*pipeline_parallel_size"):
        plan_placement(_vllm(tensor_parallel_size=16), parse_nodes(["2*8xH200"]))
    with pytest.raises(PlacementError, match="no node has accelerator H200"):
        plan_placement(_vllm(), parse_nodes(["8xA100"]))
    with pytest.raises(PlacementError, match=r"gpu_memory_utilization <= 0\.5"):
        plan_placement(_vllm(num_gpus=0.5, gpu_memory_utilization=0.9), parse_nodes(["8xH200"]))
    with pytest.raises(PlacementError, match="tensor parallelism needs whole GPUs"):
        plan_placement(_vllm(num_gpus=0.5, gpu_memory_utilization=0.4, tensor_parallel_size=2), parse_nodes(["8xH200"]))
    with pytest.raises(PlacementError, match="lower replicas/min_replicas or add nodes"):
        plan_placement(_vllm(tensor_parallel_size=4, min_replicas=3, max_replicas=3), parse_nodes(["8xH200"]))


def test_pipeline_stages_span_nodes_and_each_stage_stays_on_one() -> None:
    config = _vllm(tensor_parallel_size=8, engine_kwargs={"pipeline_parallel_size": 2})
    placement = plan_placement(config, parse_nodes(["2*8xH200"]))
    _invariants(placement, config)
    assert {worker.node for worker in placement.workers if worker.gpu >= 0} == {"node-1", "node-2"}


def test_node_specs_and_the_live_clusters_nodes() -> None:
    with pytest.raises(PlacementError, match="COUNT"):
        parse_nodes(["eight H200"])
    listed = [
        {
            "Alive": True,
            "NodeID": "abcdef0123",
            "NodeManagerAddress": "10.0.0.2",
            "Resources": {"CPU": 64.0, "GPU": 8.0, "accelerator_type:H200": 1.0},
        },
        {"Alive": False, "NodeID": "dead", "Resources": {"CPU": 8.0}},
    ]
    (node,) = nodes_from_ray(listed)
    assert (node.cpus, node.gpus, node.accelerator) == (64.0, 8.0, "H200")


def test_serve_configs_render_the_llm_configs_and_client_replicas_without_gpus() -> None:
    configs = serve_configs(load_profile(PROFILES / "h200-1node.toml"))
    llm = {entry["model_loading_config"]["model_id"]: entry for entry in configs["semray-vllm"]["llm_configs"]}
    assert llm["Qwen/Qwen2.5-72B-Instruct"]["engine_kwargs"]["tensor_parallel_size"] == 2
    assert llm["Qwen/Qwen2.5-7B-Instruct"]["placement_group_config"]["bundle_per_worker"]["GPU"] == 0.5
    assert configs["deployments"]["semray-large"]["ray_actor_options"]["num_gpus"] == 0.0
    assert configs["deployments"]["semray-embedding"]["ray_actor_options"]["num_gpus"] == 0.25


def test_serve_plan_on_the_command_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    profile = str(PROFILES / "h200-1node.toml")
    assert main(["serve", "plan", "--config", profile, "--node", "8xH200:128"]) == 0
    out = capsys.readouterr().out
    assert "large     replica 1 engine    2 x (1 GPU, 1 CPU) on GPU 0,1" in out and "nothing was started" in out
    assert main(["serve", "plan", "--config", profile, "--node", "8xH200:128", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["placement"]["unplaced"] == [] and "semray-vllm" in document["configs"]
    assert main(["serve", "plan", "--config", profile, "--node", "4xH200"]) == 2
    assert "does not hold it" in capsys.readouterr().err
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("SEMRAY_RAY_ADDRESS", raising=False)
    assert main(["serve", "plan", "--config", profile]) == 2
    assert "--node 8xH200:128" in capsys.readouterr().err


@settings(max_examples=60, deadline=None)
@given(
    tensor=st.sampled_from([1, 2, 4, 8]),
    fraction=st.sampled_from([0.0, 0.25, 0.5]),
    large_min=st.integers(1, 3),
    extra=st.integers(0, 2),
    small_replicas=st.integers(1, 6),
    nodes=st.integers(1, 4),
)
def test_a_placement_never_overbooks_a_gpu_or_splits_a_tensor_parallel_group(
    tensor: int, fraction: float, large_min: int, extra: int, small_replicas: int, nodes: int
) -> None:
    config = ServingConfig(
        large=TierConfig(
            backend="vllm",
            model="l",
            accelerator_type="H200",
            tensor_parallel_size=tensor,
            min_replicas=large_min,
            max_replicas=large_min + extra,
        ),
        small=TierConfig(
            backend="vllm",
            model="s",
            num_gpus=fraction,
            gpu_memory_utilization=max(fraction, 0.1) if fraction else 0.9,
            min_replicas=small_replicas,
            max_replicas=small_replicas,
        ),
        embedding=TierConfig(backend="sentence_transformers", model="e", num_gpus=0.25, replicas=2),
    )
    # Every size is a power of two dividing a node's 8 GPUs (and CPUs are plentiful), so first fit
    # largest first packs perfectly: refused exactly when the required GPUs exceed the cluster's.
    required = large_min * tensor + small_replicas * (fraction or 1.0) + 2 * 0.25
    try:
        placement = plan_placement(config, parse_nodes([f"{nodes}*8xH200:64"]))
    except PlacementError:
        assert required > 8 * nodes
        return
    assert required <= 8 * nodes
    _invariants(placement, config)
