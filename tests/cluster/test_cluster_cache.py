"""The response cache of a cluster: a second run, from another machine's driver, after the first's
worker nodes are gone and a fresh one joined, pays no model call for the answers the first paid for.

``ray.cluster_utils.Cluster`` starts a head and two worker nodes on loopback (as in
``test_multi_node.py``). A filter-then-classify query over the demo reviews runs on simulated tiers
with the response cache on, its driver's state folder ``a``. Then both worker nodes are removed
and a fresh one joins, and the same query runs from a driver whose state folder is ``b`` (another
machine, or a job's fresh working directory: with a node-local cache its replicas would open
``b``'s empty file and pay for every row again). Checked: the second run paid 0 calls and wrote
the first's output; no process opened a cache file under ``b``; the cache is the head node's, in
``a``, held by the cluster's cache actor (``serving/cluster_cache.py``). With
``cache_scope="node"`` the second run paid all 116 calls again (checked by hand).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from loopback_nodes import add_node, start_nodes
from test_multi_node import reviews_query

from semray.demo import corpus
from semray.demo.models import file_serving
from semray.serving.config import ServingConfig
from semray.serving.simulator.config import ModelProfile
from semray.settings import Settings
from semray.transactions import read_output, show_run

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]

ROWS = 80
PROFILE = ModelProfile(latency_base_s=0.02, price_in_per_million=2.5, price_out_per_million=10.0)


def _serving(data: Path) -> ServingConfig:
    return file_serving(data, PROFILE, "srcache").model_copy(update={"cache_enabled": True})


def test_a_second_run_on_another_node_pays_no_call_the_first_paid(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from semray.cluster.connect import connect
    from semray.pipeline.runs.execute import publish_parquet
    from semray.serving.cluster_cache import CLUSTER_CACHE_NAME, NAMESPACE
    from semray.serving.lifecycle import serve_status

    data, out = workdir / "data", workdir / "out"
    corpus.write(data, rows=ROWS)
    out.mkdir()
    first = Settings(state_dir=workdir / "a", semantic_batch_size=8, semantic_actors=2)
    cluster, workers = start_nodes(workdir, monkeypatch, first)
    first = first.model_copy(update={"ray_address": cluster.address})
    second = first.model_copy(update={"state_dir": workdir / "b"})
    try:
        connect(first)
        paid = publish_parquet(
            reviews_query(data, first, _serving(data)).plan, first, out / "a.parquet", _serving(data)
        )
        before = show_run(first, paid.run_id)
        assert before.status == "succeeded" and before.usage.calls > 0

        for node in workers:  # the nodes that may have answered the first run go; a new one comes
            cluster.remove_node(node)
        fresh = add_node(cluster)
        cluster.wait_for_nodes()
        again = publish_parquet(
            reviews_query(data, second, _serving(data)).plan, second, out / "b.parquet", _serving(data)
        )
        after = show_run(second, again.run_id)
        assert after.status == "succeeded"
        assert after.usage.calls == 0, f"the second run paid {after.usage.calls} calls the first had paid for"
        assert sorted(map(str, read_output(out / "b.parquet").to_pylist())) == sorted(
            map(str, read_output(out / "a.parquet").to_pylist())
        )
        assert not list((workdir / "b").rglob("*.sqlite")), "a replica opened a cache file of its own node"
        held, node = ray.get(ray.get_actor(CLUSTER_CACHE_NAME, namespace=NAMESPACE).where.remote())
        assert held == str((workdir / "a" / "cache" / "responses.sqlite").resolve())
        head = next(n["NodeID"] for n in ray.nodes() if "node:__internal_head__" in n["Resources"])
        assert node == head and node != fresh.node_id
        # `semray serve status` from the second machine: the running tiers are its profile's (the
        # cache path of its own state folder does not count), and the cache is the head node's.
        status = serve_status(second, _serving(data))
        assert status["deployed"] and all(entry["matches_profile"] for entry in status["deployed"].values())
        assert status["cache"]["path"] == held and status["cache"]["entries"] > 0
        sys.stdout.write(
            f"first run: {before.usage.calls} calls; second (fresh node {fresh.node_id[:12]}): {after.usage.calls}\n"
        )
    finally:
        ray.shutdown()
        cluster.shutdown()
