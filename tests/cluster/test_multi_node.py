"""A semantic query across three Ray nodes on loopback, with a worker node killed mid-run.

``ray.cluster_utils.Cluster`` starts a head and two worker nodes (two logical CPUs each: with
one CPU each the run was seen to stall before its first commit, the fractional actors and the
Serve replica leaving no node a whole CPU for a read task), temp dir under the state folder,
every address 127.0.0.1. A filter-then-classify query over 200 demo reviews
is written to Parquet on a simulated tier (cache off, 0.05 s a call). Once the run has
committed a few batches and one of its semantic actors runs on a worker node, that node is
SIGKILLed (``remove_node(allow_graceful=False)``): its raylet, object store and workers die.
Ray Data restarts the actors and retries the tasks elsewhere and the run finishes.

Checked: the output has every row once and equals a later uninterrupted run's (multiset keyed
by row id); in the journal no batch is committed twice and no row twice for one operator, so
no committed answer was paid for twice; the actors really ran on more than one node.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from loopback_nodes import start_nodes

from semray.api import read_csv
from semray.demo import corpus
from semray.demo.models import file_serving
from semray.serving.config import ServingConfig
from semray.serving.simulator.config import ModelProfile
from semray.settings import Settings
from semray.transactions import read_journal, read_output, show_run
from semray.transactions.journal import JOURNAL_NAME
from semray.transactions.records import BatchCommitted

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

ROWS = 200
KILL_AFTER_BATCHES = 3
SLOW = ModelProfile(latency_base_s=0.2, price_in_per_million=2.5, price_out_per_million=10.0)


def _serving(data: Path) -> ServingConfig:
    return file_serving(data, SLOW, "srnode")


def reviews_query(data: Path, settings: Settings, serving: ServingConfig) -> Any:
    """A filter, then a classification, over the demo corpus's reviews (also the store test's run)."""
    return (
        read_csv(data / "reviews.csv", settings=settings)
        .sem_filter("{review} is positive")
        .sem_classify("Which aspect does {review} discuss?", ["quality", "price", "delivery", "support"], "aspect")
        .with_serving(serving)
    )


def test_killing_a_worker_node_loses_and_repeats_nothing(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    from ray.util.state import list_actors

    from semray.pipeline.runs.execute import publish_parquet

    data, state, out = workdir / "data", workdir / "s", workdir / "out"
    corpus.write(data, rows=ROWS)
    out.mkdir()
    base = Settings(state_dir=state, semantic_batch_size=8, semantic_actors=2)
    cluster, workers = start_nodes(workdir, monkeypatch, base, dashboard=True)  # list_actors needs the dashboard
    settings = base.model_copy(update={"ray_address": cluster.address})
    try:
        from semray.cluster.connect import connect

        connect(settings)
        worker_ids = {node.node_id: node for node in workers}
        output, baseline = out / "result.parquet", out / "baseline.parquet"
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["written"] = publish_parquet(
                    reviews_query(data, settings, _serving(data)).plan, settings, output, _serving(data)
                )
            except BaseException as error:  # reported by the test thread below
                outcome["error"] = error

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        killed, actor_nodes = None, set()
        deadline = time.monotonic() + 300
        while killed is None and thread.is_alive() and time.monotonic() < deadline:
            actors = list_actors(address=cluster.address, filters=[("state", "=", "ALIVE")], limit=1000)
            on = {a.node_id for a in actors if "MapWorker" in (a.class_name or "")}
            actor_nodes |= on
            runs = sorted((state / "runs").glob("2*")) if (state / "runs").exists() else []
            committed = show_run(settings, runs[-1].name).batches_committed if runs else 0
            victims = [node_id for node_id in on if node_id in worker_ids]
            if committed >= KILL_AFTER_BATCHES and victims:
                killed = victims[0]
                cluster.remove_node(worker_ids[killed], allow_graceful=False)
                break
            time.sleep(0.2)
        thread.join(timeout=600)
        assert "error" not in outcome, f"the run failed after the node was killed: {outcome.get('error')!r}"
        assert killed is not None, f"no semantic actor ran on a worker node (actors on {actor_nodes})"
        written = outcome["written"]
        detail = show_run(settings, written.run_id)
        assert detail.status == "succeeded"

        clean = publish_parquet(reviews_query(data, settings, _serving(data)).plan, settings, baseline, _serving(data))
        published, expected = read_output(output), read_output(baseline)
        ids = published.column("_rowid").to_pylist()
        assert len(ids) == len(set(ids)) == expected.num_rows > 0
        assert sorted(map(str, published.to_pylist())) == sorted(map(str, expected.to_pylist()))

        commits = [
            r
            for r in read_journal(state / "runs" / written.run_id / JOURNAL_NAME).records
            if isinstance(r, BatchCommitted)
        ]
        batches = [(r.operator_key, r.batch_key) for r in commits]
        assert len(batches) == len(set(batches)), "a batch was committed twice"
        rows = [(r.operator_key, row) for r in commits for row in r.row_ids]
        assert len(rows) == len(set(rows)), "a row was committed twice for one operator"
        reference = show_run(settings, clean.run_id)
        assert {o.operator_key: o.rows_in for o in detail.operators} == {
            o.operator_key: o.rows_in for o in reference.operators
        }
        sys.stdout.write(
            f"killed node {killed[:8]} after {KILL_AFTER_BATCHES}+ batches; calls {detail.usage.calls} "
            f"(uninterrupted: {reference.usage.calls}); actors ran on {len(actor_nodes)} nodes\n"
        )
    finally:
        ray.shutdown()
        cluster.shutdown()
