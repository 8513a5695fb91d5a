"""Will the tiers' replicas fit? Checked before deploying, because Serve waits for resources forever.

A Serve replica that asks for more CPUs or GPUs than the cluster has free stays ``DEPLOYING``
with no error (Serve only logs, every 30 s, that it "has taken more than 30s to be scheduled").
``check_capacity`` compares what the tiers about to be deployed ask for (replicas x per-replica
``num_cpus`` / ``num_gpus``, and a vLLM engine's placement bundles) with what Ray reports free,
plus what the apps being replaced give back, and raises ``TierResourcesError`` naming the tiers,
the numbers and what to do. Tiers that are reused ask for nothing.

>>> need = ReplicaNeed(app="b-small", tier="small", replicas=1, per_replica={"CPU": 1.0})
>>> cluster = ClusterResources(free={"CPU": 0.5}, total={"CPU": 2.0}, largest_node={"CPU": 2.0})
>>> try:
...     check_capacity([need], cluster)
... except TierResourcesError as error:
...     print(error.resource, error.needed, error.free, error.tiers)
CPU 1.0 0.5 ('b-small',)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from semray.serving.config import ServingConfig
from semray.serving.errors import TierResourcesError

RESOURCES: tuple[str, ...] = ("CPU", "GPU")
"""The resources a tier config asks for (``num_cpus``, ``num_gpus``); others are not checked."""
_KNOB = {"CPU": "num_cpus", "GPU": "num_gpus"}
_EPSILON = 1e-6  # Ray reports fractional resources with rounding noise


@dataclass(frozen=True, slots=True)
class ReplicaNeed:
    """What one app asks of the cluster: ``replicas`` copies of ``per_replica`` resources."""

    app: str
    tier: str
    replicas: int
    per_replica: Mapping[str, float]

    def total(self, resource: str) -> float:
        return self.replicas * self.per_replica.get(resource, 0.0)

    def describe(self, resource: str) -> str:
        plural = "replica" if self.replicas == 1 else "replicas"
        return f"{self.app}: {self.replicas} {plural} x {_number(self.per_replica.get(resource, 0.0))} {resource}"


@dataclass(frozen=True, slots=True)
class ClusterResources:
    """Free and total resources, the largest node's, and the Serve apps holding some now."""

    free: Mapping[str, float]
    total: Mapping[str, float]
    largest_node: Mapping[str, float]
    holders: tuple[str, ...] = field(default=())


def tier_needs(config: ServingConfig, apps: Mapping[str, str], vllm_app: str | None = None) -> list[ReplicaNeed]:
    """What deploying ``apps`` (tier -> app name) asks for; with ``vllm_app``, the vLLM engines too."""
    needs: list[ReplicaNeed] = []
    for tier, app in apps.items():
        tier_config = config.tier(tier)
        # A vLLM tier's own replica is only an HTTP client of the engine, which holds the GPUs.
        gpus = 0.0 if tier_config.backend == "vllm" else tier_config.num_gpus
        needs.append(ReplicaNeed(app, tier, tier_config.replicas, {"CPU": tier_config.num_cpus, "GPU": gpus}))
    if vllm_app is not None:
        for tier_config in config.vllm_tiers:
            # Mirrors backends/vllm.py's placement bundles: one per engine worker.
            gpus = tier_config.num_gpus if 0 < tier_config.num_gpus < 1 else 1.0
            bundle = {"CPU": max(tier_config.num_cpus, 1.0), "GPU": gpus}
            workers = max(tier_config.min_replicas, 1) * tier_config.tensor_parallel_size
            needs.append(ReplicaNeed(vllm_app, tier_config.model, workers, bundle))
    return needs


def check_capacity(needs: Sequence[ReplicaNeed], cluster: ClusterResources) -> None:
    """Raise ``TierResourcesError`` when ``needs`` cannot all be placed on ``cluster`` now."""
    for resource in RESOURCES:
        knob = _KNOB[resource]
        for need in needs:
            each = need.per_replica.get(resource, 0.0)
            largest = cluster.largest_node.get(resource, 0.0)
            if each > largest + _EPSILON:
                raise TierResourcesError(
                    f"tier {need.tier!r} (Serve app {need.app!r}) asks for {_number(each)} {resource} per replica "
                    f"but the largest node of the Ray cluster has {_number(largest)} {resource}: no node can ever "
                    f"hold it. Nothing was deployed; lower {knob} of this tier in the model profile, or add a node "
                    f"with enough {resource}",
                    resource=resource,
                    needed=each,
                    free=cluster.free.get(resource, 0.0),
                    total=cluster.total.get(resource, 0.0),
                    tiers=(need.app,),
                )
        asking = [need for need in needs if need.total(resource) > 0]
        needed = sum(need.total(resource) for need in asking)
        free = cluster.free.get(resource, 0.0)
        if needed <= free + _EPSILON:
            continue
        total = cluster.total.get(resource, 0.0)
        holders = f" Serve apps holding resources now: {', '.join(cluster.holders)}." if cluster.holders else ""
        raise TierResourcesError(
            f"not enough {resource} on the Ray cluster for the tiers to deploy: they need {_number(needed)} "
            f"{resource} ({'; '.join(need.describe(resource) for need in asking)}) but {_number(free)} of "
            f"{_number(total)} {resource} are free.{holders} Nothing was deployed; free resources "
            f"({_serve_down_hint(cluster.holders)} for tiers another run or `serve up` left running), lower "
            f"{knob} of these tiers in the model profile, or add nodes to the cluster",
            resource=resource,
            needed=needed,
            free=free,
            total=total,
            tiers=tuple(dict.fromkeys(need.app for need in asking)),
        )


def read_cluster(freed: Mapping[str, float], holders: Sequence[str]) -> ClusterResources:
    """What the connected Ray cluster has free now, plus ``freed`` (held by apps about to be replaced)."""
    import ray

    available: dict[str, float] = ray.available_resources()  # type: ignore[no-untyped-call]
    cluster: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    listed: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    free = {name: float(available.get(name, 0.0)) + freed.get(name, 0.0) for name in RESOURCES}
    total = {name: float(cluster.get(name, 0.0)) for name in RESOURCES}
    nodes = [node.get("Resources", {}) for node in listed if node.get("Alive")]
    largest = {name: max((float(node.get(name, 0.0)) for node in nodes), default=0.0) for name in RESOURCES}
    return ClusterResources(free=free, total=total, largest_node=largest, holders=tuple(holders))


def _serve_down_hint(holders: Sequence[str]) -> str:
    prefixes = sorted({holder.split(" ", 1)[0].rsplit("-", 1)[0] for holder in holders if "-" in holder})
    if not prefixes:
        return "`semray serve down --prefix <prefix>`"
    return " or ".join(f"`semray serve down --prefix {prefix}`" for prefix in prefixes)


def _number(value: float) -> str:
    return f"{round(value, 3):g}"
