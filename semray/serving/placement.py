"""Where a model profile's tiers would go on a GPU cluster, worked out before anything starts.

``semray serve plan`` reads a model profile and a cluster shape (``--node 8xH200:128``, or the
live cluster's nodes) and prints which node holds which engine worker and replica, the
``ray.serve.llm`` ``LLMConfig`` arguments of the vLLM tiers and the Serve options of the others,
without deploying. A profile that cannot be placed is refused here, with the reason, instead of
leaving Serve waiting for resources forever.

What is placed, per tier (mirroring ``backends/vllm.py`` and ``lifecycle``):

- a vLLM tier: per engine replica, ``tensor_parallel_size`` x ``pipeline_parallel_size``
  workers of ``{GPU: num_gpus (a fraction) or 1, CPU: max(num_cpus, 1)}``; each
  tensor-parallel group on one node (``STRICT_PACK``), pipeline stages may span nodes;
  ``min_replicas`` must fit, ``max_replicas`` beyond them are reported when they do not;
  the tier's own Serve replica (an HTTP client of the engine) takes ``num_cpus`` CPUs;
- any other tier: ``replicas`` x ``{CPU: num_cpus, GPU: num_gpus}`` (the embedder on a quarter
  of a GPU, say);
- a node qualifies for a tier with ``accelerator_type`` only when its accelerator matches.

Placement is first fit, the largest groups first, on nodes in the order given. Checked too:
a fractional-GPU vLLM tier whose ``gpu_memory_utilization`` exceeds its share of the GPU
(vLLM would claim that fraction of the whole GPU's memory), and fractional GPUs with tensor
parallelism (vLLM needs whole GPUs then).

>>> from semray.serving.config import ServingConfig, TierConfig
>>> config = ServingConfig(large=TierConfig(backend="vllm", model="big", accelerator_type="H200",
...     tensor_parallel_size=4, max_replicas=2))
>>> placement = plan_placement(config, parse_nodes(["8xH200:96"]))
>>> [(worker.node, worker.tier, worker.replica) for worker in placement.workers if worker.tier == "large"][:2]
[('node-1', 'large', 1), ('node-1', 'large', 1)]
>>> placement.gpus_used, placement.unplaced
(8.0, ())
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from semray.serving.backends.vllm import llm_config_kwargs
from semray.serving.config import TIER_NAMES, ServingConfig, TierConfig
from semray.serving.errors import ServingConfigError

_EPSILON = 1e-6
_NODE = re.compile(
    r"^\s*(?:(?P<count>\d+)\*)?(?P<gpus>\d+(?:\.\d+)?)(?:x(?P<accelerator>[A-Za-z0-9_-]+))?(?::(?P<cpus>\d+(?:\.\d+)?))?\s*$"
)
DEFAULT_CPUS_PER_GPU = 12
"""CPUs assumed per GPU when a ``--node`` spec names none (an 8-GPU node: 96)."""


class PlacementError(ServingConfigError):
    """The profile's tiers cannot be placed on the cluster described."""


@dataclass(frozen=True, slots=True)
class NodeShape:
    """One node: its name, CPUs, GPUs and accelerator type (None: any/unknown)."""

    name: str
    cpus: float
    gpus: float
    accelerator: str | None = None


@dataclass(frozen=True, slots=True)
class Worker:
    """One placed bundle: which tier and replica it serves and its resources on ``node``."""

    node: str
    tier: str
    replica: int
    role: str
    """``engine`` (a vLLM engine worker), ``replica`` (a Serve replica), ``autoscale`` (beyond min_replicas)."""
    gpus: float
    cpus: float
    gpu: int = -1
    """The node's GPU (0-based) the bundle sits on; -1: none."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where every bundle went, what did not fit (autoscaling headroom only), and the totals."""

    nodes: tuple[NodeShape, ...]
    workers: tuple[Worker, ...]
    unplaced: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def gpus_used(self) -> float:
        return sum(worker.gpus for worker in self.workers)

    @property
    def cpus_used(self) -> float:
        return sum(worker.cpus for worker in self.workers)


@dataclass(slots=True)
class _Free:
    """A node's free CPUs and the free share of each of its GPUs (Ray places a fraction on one GPU)."""

    shape: NodeShape
    cpus: float
    gpus: list[float]
    held: list[Worker] = field(default_factory=list)

    def take(self, group: _Group) -> list[int] | None:
        """The GPU of each of the group's bundles, or None when the node cannot hold the group."""
        if self.cpus + _EPSILON < group.cpus * group.count:
            return None
        if group.gpus == 0:
            return [-1] * group.count
        free = list(self.gpus)
        chosen = []
        for _ in range(group.count):
            slot = next((index for index, share in enumerate(free) if share + _EPSILON >= group.gpus), None)
            if slot is None:
                return None
            free[slot] -= group.gpus
            chosen.append(slot)
        return chosen


@dataclass(frozen=True, slots=True)
class _Group:
    """Bundles that must land on one node (a tensor-parallel group, or one Serve replica)."""

    tier: str
    replica: int
    role: str
    count: int
    gpus: float
    cpus: float
    accelerator: str | None
    required: bool


def parse_nodes(specs: Sequence[str]) -> tuple[NodeShape, ...]:
    """Nodes from ``[COUNT*]GPUS[xACCELERATOR][:CPUS]`` specs, e.g. ``8xH200:128`` or ``4*8xH200``.

    >>> [(node.name, node.gpus, node.accelerator, node.cpus) for node in parse_nodes(["2*8xH200", "0:16"])]
    [('node-1', 8.0, 'H200', 96.0), ('node-2', 8.0, 'H200', 96.0), ('node-3', 0.0, None, 16.0)]
    """
    nodes: list[NodeShape] = []
    for spec in specs:
        match = _NODE.match(spec)
        if match is None:
            raise PlacementError(
                f"node spec {spec!r} is not [COUNT*]GPUS[xACCELERATOR][:CPUS], e.g. 8xH200:128 (one node with 8 "
                "H200 and 128 CPUs), 4*8xH200 (four of them) or 0:16 (a CPU-only node)"
            )
        gpus = float(match["gpus"])
        cpus = float(match["cpus"]) if match["cpus"] else max(gpus * DEFAULT_CPUS_PER_GPU, 1.0)
        for _ in range(int(match["count"] or 1)):
            nodes.append(NodeShape(f"node-{len(nodes) + 1}", cpus, gpus, match["accelerator"]))
    if not nodes:
        raise PlacementError("no nodes to place on: give --node 8xH200 (repeatable), or --ray-address of a cluster")
    return tuple(nodes)


def nodes_from_ray(listed: Sequence[Mapping[str, Any]]) -> tuple[NodeShape, ...]:
    """Nodes from ``ray.nodes()``: alive ones, accelerator from their ``accelerator_type:X`` resource."""
    nodes = []
    for node in listed:
        if not node.get("Alive"):
            continue
        resources = node.get("Resources", {})
        kinds = [name.split(":", 1)[1] for name in resources if name.startswith("accelerator_type:")]
        name = str(node.get("NodeManagerAddress") or node.get("NodeID", "?"))
        nodes.append(
            NodeShape(
                f"{name} ({str(node.get('NodeID', ''))[:8]})",
                float(resources.get("CPU", 0.0)),
                float(resources.get("GPU", 0.0)),
                kinds[0] if kinds else None,
            )
        )
    if not nodes:
        raise PlacementError("the Ray cluster reports no alive node")
    return tuple(nodes)


def plan_placement(config: ServingConfig, nodes: Sequence[NodeShape], tiers: Sequence[str] = TIER_NAMES) -> Placement:
    """Place ``tiers`` of ``config`` on ``nodes``; raises ``PlacementError`` when a required part does not fit."""
    warnings = [message for name in tiers for message in _check_tier(name, config.tier(name))]
    groups = [group for name in tiers for group in _groups(name, config.tier(name))]
    # Required before autoscaling headroom; the largest first (first-fit decreasing).
    groups.sort(key=lambda group: (not group.required, -group.gpus * group.count, -group.cpus * group.count))
    free = [_Free(node, node.cpus, [1.0] * int(node.gpus)) for node in nodes]
    unplaced: list[str] = []
    for group in groups:
        target, slots = None, None
        for node in free:
            slots = node.take(group) if _qualifies(node, group) else None
            if slots is not None:
                target = node
                break
        if target is None or slots is None:
            if group.required:
                raise PlacementError(_why_not(group, free))
            unplaced.append(f"{group.tier} replica {group.replica} ({_describe(group)})")
            continue
        target.cpus -= group.cpus * group.count
        for slot in slots:
            if slot >= 0:
                target.gpus[slot] -= group.gpus
        target.held.extend(
            Worker(target.shape.name, group.tier, group.replica, group.role, group.gpus, group.cpus, slot)
            for slot in slots
        )
    workers = tuple(worker for node in free for worker in node.held)
    if unplaced:
        warnings.append(
            f"{len(unplaced)} autoscaling replica(s) beyond min_replicas cannot be placed: {'; '.join(unplaced)}; "
            "lower max_replicas or add nodes"
        )
    return Placement(tuple(nodes), workers, tuple(unplaced), tuple(warnings))


def serve_configs(config: ServingConfig, tiers: Sequence[str] = TIER_NAMES) -> dict[str, Any]:
    """What would be deployed: ``LLMConfig`` arguments of the vLLM tiers, Serve options of the others."""
    llm_configs = [llm_config_kwargs(config.tier(name)) for name in tiers if config.tier(name).backend == "vllm"]
    deployments = {
        f"{config.app_prefix}-{name}": {
            "backend": config.tier(name).backend,
            "model": config.tier(name).model,
            "num_replicas": config.tier(name).replicas,
            "ray_actor_options": {
                "num_cpus": config.tier(name).num_cpus,
                "num_gpus": 0.0 if config.tier(name).backend == "vllm" else config.tier(name).num_gpus,
            },
            "max_ongoing_requests": config.tier(name).max_ongoing_requests,
        }
        for name in tiers
    }
    configs: dict[str, Any] = {"deployments": deployments}
    if llm_configs:
        configs[f"{config.app_prefix}-vllm"] = {"llm_configs": llm_configs}
    return configs


def render_placement(placement: Placement) -> str:
    """A table per node: its workers grouped by tier and replica, then the free resources."""
    lines = []
    for node in placement.nodes:
        held = [worker for worker in placement.workers if worker.node == node.name]
        gpus = sum(worker.gpus for worker in held)
        cpus = sum(worker.cpus for worker in held)
        kind = f" x {node.accelerator}" if node.accelerator else ""
        lines.append(
            f"{node.name}: {_number(node.gpus)} GPU{kind}, {_number(node.cpus)} CPU  "
            f"(used {_number(gpus)} GPU, {_number(cpus)} CPU)"
        )
        counted: dict[tuple[str, int, str], list[Worker]] = {}
        for worker in held:
            counted.setdefault((worker.tier, worker.replica, worker.role), []).append(worker)
        for (tier, replica, role), group in counted.items():
            each = group[0]
            where = sorted({worker.gpu for worker in group if worker.gpu >= 0})
            on = f" on GPU {','.join(map(str, where))}" if where else ""
            lines.append(
                f"  {tier:<9} replica {replica} {role:<9} {len(group)} x ({_number(each.gpus)} GPU, "
                f"{_number(each.cpus)} CPU){on}"
            )
    lines.append(f"total: {_number(placement.gpus_used)} GPU, {_number(placement.cpus_used)} CPU placed")
    lines.extend(f"warning: {message}" for message in placement.warnings)
    return "\n".join(lines) + "\n"


def _groups(name: str, tier: TierConfig) -> list[_Group]:
    if tier.backend != "vllm":
        return [
            _Group(name, replica, "replica", 1, tier.num_gpus, tier.num_cpus, tier.accelerator_type, True)
            for replica in range(1, tier.replicas + 1)
        ]
    gpus = tier.num_gpus if 0 < tier.num_gpus < 1 else 1.0
    cpus = max(tier.num_cpus, 1.0)
    stages = int(tier.engine_kwargs.get("pipeline_parallel_size", 1))
    groups = [
        _Group(name, replica, "replica", 1, 0.0, tier.num_cpus, None, True) for replica in range(1, tier.replicas + 1)
    ]
    for replica in range(1, max(tier.max_replicas, tier.min_replicas, 1) + 1):
        required = replica <= max(tier.min_replicas, 1)
        role = "engine" if required else "autoscale"
        groups.extend(
            _Group(name, replica, role, tier.tensor_parallel_size, gpus, cpus, tier.accelerator_type, required)
            for _ in range(stages)
        )
    return groups


def _check_tier(name: str, tier: TierConfig) -> list[str]:
    """Refuse what vLLM would refuse at start-up; warn about what would run badly."""
    if tier.backend != "vllm":
        return []
    fraction = 0 < tier.num_gpus < 1
    if fraction and tier.tensor_parallel_size > 1:
        raise PlacementError(
            f"tier {name!r}: num_gpus {_number(tier.num_gpus)} (a fraction of a GPU) with tensor_parallel_size "
            f"{tier.tensor_parallel_size}: tensor parallelism needs whole GPUs; set num_gpus = 0 (one GPU per worker)"
        )
    if fraction and tier.gpu_memory_utilization > tier.num_gpus + _EPSILON:
        raise PlacementError(
            f"tier {name!r} shares a GPU (num_gpus {_number(tier.num_gpus)}) but gpu_memory_utilization is "
            f"{_number(tier.gpu_memory_utilization)}: vLLM would claim that share of the whole GPU's memory and the "
            f"tiers beside it would not start; set gpu_memory_utilization <= {_number(tier.num_gpus)}"
        )
    if tier.accelerator_type is None:
        return [f"tier {name!r} names no accelerator_type: its engines may land on any GPU node"]
    return []


def _qualifies(node: _Free, group: _Group) -> bool:
    if group.accelerator is None or group.gpus == 0:
        return True
    return node.shape.accelerator is not None and node.shape.accelerator.lower() == group.accelerator.lower()


def _why_not(group: _Group, free: Sequence[_Free]) -> str:
    what = f"tier {group.tier!r} replica {group.replica} needs {_describe(group)} on one node"
    matching = [node for node in free if _qualifies(node, group)]
    if not matching:
        return f"{what}, but no node has accelerator {group.accelerator}; give nodes with it or change accelerator_type"
    largest = max(node.shape.gpus for node in matching)
    if group.gpus * group.count > largest + _EPSILON:
        return (
            f"{what}, but the largest node has {_number(largest)} GPUs: lower tensor_parallel_size, or split the "
            "model over nodes with engine_kwargs.pipeline_parallel_size"
        )
    left = ", ".join(
        f"{node.shape.name} {_number(sum(node.gpus))} GPU/{_number(node.cpus)} CPU free" for node in matching
    )
    return f"{what}, but what is left does not hold it ({left}): lower replicas/min_replicas or add nodes"


def _describe(group: _Group) -> str:
    return f"{group.count} x ({_number(group.gpus)} GPU, {_number(group.cpus)} CPU)"


def _number(value: float) -> str:
    return f"{round(value, 3):g}"
