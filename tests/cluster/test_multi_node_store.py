"""A semantic run over two Ray nodes whose commits reach the object store, resumed from it elsewhere.

``ray.cluster_utils.Cluster`` starts a head (the driver's node) and two worker nodes on loopback.
The run copies itself to a store (``Settings.state_uri``): a ``file://`` folder, then moto's S3
server on 127.0.0.1 through pyarrow's S3 filesystem; its actors on the worker
nodes commit there as write-once objects (``transactions/remote_commits.py``), never to the
driver's state folder. Once a worker node has stored commits it is SIGKILLed
(``remove_node(allow_graceful=False)``); Ray Data retries its tasks elsewhere. Two batches later
the run is stopped, then resumed by id from a fresh state folder (another machine, which has only
the store). The first driver is kept from merging the stored commits into its journal (as if its
node died first): they reach the run only through the resume's merge. Checked: the commits of the
worker nodes, the killed one's included, are in the run's journal (merged, with their ``origin``),
no batch or row is committed twice, nothing was refused, the two attempts together paid exactly
the model calls of an uninterrupted run, and the output is that run's.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback_nodes import start_nodes
from s3_server import S3Server
from test_multi_node import reviews_query

from semray.demo import corpus
from semray.demo.models import file_serving
from semray.serving.config import ServingConfig
from semray.serving.simulator.config import ModelProfile
from semray.settings import Settings
from semray.transactions import RunCancelledError, cancel_run, read_journal, read_output, show_run
from semray.transactions.journal import JOURNAL_NAME
from semray.transactions.records import BatchCommitted
from semray.transactions.remote import open_store
from semray.transactions.remote_commits import CommitMerger, commit_names, merged_origins, origin_of

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]

ROWS = 120
SLOW = ModelProfile(latency_base_s=0.1, price_in_per_million=2.5, price_out_per_million=10.0)


@pytest.fixture(params=["file", "s3"])
def store_settings(request: pytest.FixtureRequest, workdir: Path) -> Iterator[dict[str, Any]]:
    """The store's settings: a ``file://`` folder, or moto's S3 server on 127.0.0.1 (started before
    the cluster, so its nodes inherit the fake credentials; the endpoint reaches the worker nodes
    folded into the store URI, ``Settings.state_store_uri``)."""
    if request.param == "file":
        yield {"state_uri": (workdir / "bucket").as_uri()}
        return
    with S3Server.start() as server:
        yield {"state_uri": server.uri(f"{workdir.name}/semray"), "state_endpoint": server.endpoint}


def _serving(data: Path) -> ServingConfig:
    return file_serving(data, SLOW, "srstore")


def test_a_resume_from_the_store_pays_nothing_the_worker_node_committed(
    workdir: Path, store_settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from semray.cluster.connect import connect
    from semray.pipeline.runs.execute import publish_parquet, resume

    data, out = workdir / "data", workdir / "out"
    corpus.write(data, rows=ROWS)
    out.mkdir()
    base = Settings(
        state_dir=workdir / "driver", state_sync_s=0.5, semantic_batch_size=8, semantic_actors=2, **store_settings
    )
    uri = base.state_store_uri or ""
    cluster, nodes = start_nodes(workdir, monkeypatch, base)
    workers = {node.node_id[:12]: node for node in nodes}
    settings = base.model_copy(update={"ray_address": cluster.address})
    elsewhere = settings.model_copy(update={"state_dir": workdir / "elsewhere"})
    try:
        connect(settings)
        store = open_store(uri)
        output, baseline = out / "result.parquet", out / "baseline.parquet"
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["written"] = publish_parquet(
                    reviews_query(data, settings, _serving(data)).plan, settings, output, _serving(data)
                )
            except BaseException as error:  # a stopped run raises RunCancelledError
                outcome["error"] = error

        run_id, stopped, killed, done_at_kill = None, False, "", 0
        with monkeypatch.context() as unmerged:
            unmerged.setattr(CommitMerger, "merge", lambda self: 0)  # this driver never merges
            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            deadline = time.monotonic() + 150
            runs_of = workdir / "driver" / "runs"
            while thread.is_alive() and time.monotonic() < deadline:
                run_id = max((path.name for path in runs_of.glob("2*")), default=None) if runs_of.exists() else None
                names = commit_names(store, run_id) if run_id else []
                done = len(names)  # every commit is an object, the driver's node's too (stored as journaled)
                stored_on = sorted({name[:12] for name in names} & workers.keys())
                if not killed and stored_on and len(names) >= 2:
                    killed, done_at_kill = stored_on[0], done  # a node whose commits only the store holds
                    cluster.remove_node(workers[killed], allow_graceful=False)
                elif killed and run_id and done >= done_at_kill + 2:  # the run went on without it
                    stopped = cancel_run(settings, run_id) == "running"
                    break
                time.sleep(0.1)
            thread.join(timeout=150)
        assert killed, f"no worker node stored a commit before the end: {outcome}"
        assert run_id is not None and stopped, f"the run ended before it was stopped: {outcome}"
        assert isinstance(outcome.get("error"), RunCancelledError), f"the run was not stopped: {outcome}"
        first = show_run(settings, run_id)
        assert first.status == "cancelled"
        pushed, _ = store.records(run_id)
        merged = [origin for origin in merged_origins(pushed) if origin.removeprefix("commits/")[:12] in workers]
        assert not merged, "the first driver merged nothing of the worker nodes"
        journaled = merged_origins(read_journal(workdir / "driver" / "runs" / run_id / JOURNAL_NAME).records)
        stored = len([name for name in commit_names(store, run_id) if origin_of(name) not in journaled])
        assert show_run(elsewhere, run_id).batches_committed == first.batches_committed + stored

        # Another machine: only the store. The resume merges what the worker node stored after the
        # driver's last merge, then pays only for what no attempt committed.
        written = resume(elsewhere, run_id, _serving(data))
        detail = show_run(elsewhere, run_id)
        assert detail.status == "succeeded" and written.run_id == run_id

        clean = publish_parquet(reviews_query(data, settings, _serving(data)).plan, settings, baseline, _serving(data))
        published, expected = read_output(output), read_output(baseline)
        ids = published.column("_rowid").to_pylist()
        assert len(ids) == len(set(ids)) == expected.num_rows > 0
        assert sorted(map(str, published.to_pylist())) == sorted(map(str, expected.to_pylist()))

        records = read_journal(workdir / "elsewhere" / "runs" / run_id / JOURNAL_NAME).records
        commits = [r for r in records if isinstance(r, BatchCommitted)]
        from_store = [r for r in commits if r.origin is not None]
        assert any(r.origin.startswith(f"commits/{killed}") for r in from_store if r.origin), (
            "no commit of the killed worker node reached the journal through the store"
        )
        assert len(from_store) == len(commit_names(store, run_id)), "every stored commit merged once"
        batches = [(r.operator_key, r.batch_key) for r in commits]
        assert len(batches) == len(set(batches)), "a batch was committed twice"
        rows = [(r.operator_key, row) for r in commits for row in r.row_ids]
        assert len(rows) == len(set(rows)), "a row was committed twice for one operator"
        assert detail.batches_refused == 0
        reference = show_run(settings, clean.run_id)
        assert detail.usage.calls == reference.usage.calls, "the two attempts paid more than one run"
        assert {o.operator_key: o.rows_in for o in detail.operators} == {
            o.operator_key: o.rows_in for o in reference.operators
        }
        sys.stdout.write(
            f"killed node {killed} after {done_at_kill} commits; stopped with {first.batches_committed} in the "
            f"driver's journal and {stored} stored by worker nodes ({len(commit_names(store, run_id))} in the end); "
            "calls: first driver's journal "
            f"{first.usage.calls}, all {detail.usage.calls} (uninterrupted: {reference.usage.calls})\n"
        )
    finally:
        ray.shutdown()
        cluster.shutdown()
