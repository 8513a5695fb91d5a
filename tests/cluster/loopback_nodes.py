"""A Ray cluster of loopback nodes for the multi-node tests: a head (the driver's node) and worker nodes.

``start_nodes`` leaves any Ray this process already has (``connect`` joins nothing new while one is
up, so the run would go there and never onto the nodes), keeps Ray on 127.0.0.1, and keeps
``ray.cluster_utils``' address file in the test's folder: it writes the head's address to
``$RAY_TMPDIR/ray/ray_current_cluster`` whatever ``temp_dir`` says, and on a fresh machine ``/tmp/ray``
does not exist. The caller shuts the cluster down (``ray.shutdown()`` then ``cluster.shutdown()``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from semray.settings import Settings

NODE_CPUS = 2


def start_nodes(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings, workers: int = 2, dashboard: bool = False
) -> tuple[Any, list[Any]]:
    """A head on 127.0.0.1 with Ray's temp dir inside ``settings``' state folder, and ``workers`` worker
    nodes; ``dashboard`` serves the state API (``ray.util.state.list_actors``) from the head."""
    import ray
    from ray.cluster_utils import Cluster

    from semray.cluster.connect import ray_temp_dir

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    monkeypatch.setenv("RAY_TMPDIR", str(workdir))
    (workdir / "ray").mkdir(exist_ok=True)
    ray.shutdown()
    head: dict[str, Any] = {"num_cpus": NODE_CPUS, "node_ip_address": "127.0.0.1"}
    head["temp_dir"] = str(ray_temp_dir(settings))
    if dashboard:
        head |= {"include_dashboard": True, "dashboard_host": "127.0.0.1"}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    nodes = [add_node(cluster) for _ in range(workers)]
    cluster.wait_for_nodes()
    return cluster, nodes


def add_node(cluster: Any) -> Any:
    """One more worker node on 127.0.0.1 (the caller waits for it: ``cluster.wait_for_nodes()``)."""
    return cluster.add_node(num_cpus=NODE_CPUS, node_ip_address="127.0.0.1")
