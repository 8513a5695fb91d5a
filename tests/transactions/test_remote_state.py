"""Runs copied to an object store (``Settings.state_uri``): write-once objects, read from another machine.

The store is an in-memory fsspec filesystem behind pyarrow's ``PyFileSystem``, registered under
its own scheme and made to act as an object store: no rename, copy or append (each raises), and
every write recorded, so the tests see that no object but the lease is written twice. Two
machines are two state folders (``state_dir``) sharing the store.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import pyarrow as pa
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from semray.errors import StateDirError
from semray.settings import Settings
from semray.transactions import (
    BatchLedger,
    FencedWriterError,
    LLMUsage,
    Run,
    RunCancelledError,
    RunInUseError,
    TransactionError,
    batch_key,
    begin_run,
    cancel_run,
    list_runs,
    read_journal,
    resume_run,
    show_run,
)
from semray.transactions.errors import StoreWriterConflictError
from semray.transactions.journal import JOURNAL_NAME, JournalWriter
from semray.transactions.records import BatchCommitted, ErrorRecorded
from semray.transactions.remote import LEASE_NAME, SEGMENTS, open_store
from semray.transactions.remote_commits import commit_names

PLAN = {"op": "sem_filter", "prompt": "is {review} positive?"}


class ObjectStoreLike(MemoryFileSystem):
    """Memory, with an object store's verbs only: whole-object puts, gets, lists and deletes."""

    protocol = "objstore"
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    writes: ClassVar[Counter[str]] = Counter()

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "a" in mode or "+" in mode:
            raise AssertionError(f"an object store has no appends ({mode} {path})")
        if "w" in mode:
            self.writes[self._strip_protocol(path)] += 1
        return super()._open(path, mode, **kwargs)

    def mv(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("an object store has no rename")

    def cp_file(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("an object store has no server-side copy here")


@pytest.fixture
def uri(tmp_path: Path) -> Iterator[str]:
    fsspec.register_implementation("objstore", ObjectStoreLike, clobber=True)
    ObjectStoreLike.store.clear()
    ObjectStoreLike.pseudo_dirs[:] = [""]
    ObjectStoreLike.writes.clear()
    yield f"objstore://bucket/{tmp_path.name}/semray"
    ObjectStoreLike.store.clear()


def machine(tmp_path: Path, name: str, uri: str, sync_s: float = 5.0) -> Settings:
    return Settings(state_dir=tmp_path / name, state_uri=uri, state_sync_s=sync_s)


def commit(run: Run, *row_ids: str, payload: str = "") -> str:
    """Commits one batch of ``op1`` answering ``row_ids`` with ``payload``; returns its key."""
    key, table, usage = batch(row_ids, payload)
    run.commit_batch("op1", key, row_ids, table, usage)
    return key


def batch(row_ids: tuple[str, ...], payload: str) -> tuple[str, pa.Table, LLMUsage]:
    table = pa.table({"_rowid": list(row_ids), "answer": [payload] * len(row_ids)})
    return batch_key("op1", row_ids), table, LLMUsage(calls=len(row_ids), dollars=0.5 * len(row_ids))


def test_a_finished_run_is_read_from_another_machine(tmp_path: Path, uri: str) -> None:
    first, second = machine(tmp_path, "a", uri), machine(tmp_path, "b", uri)
    with begin_run(first, PLAN, None, config={"batch_size": 2}) as run:
        commit(run, "a", "b")
        commit(run, "c", payload="x" * 100_000)  # past INLINE_BYTES: a parquet file beside the journal
        run.record_error(TimeoutError("endpoint slow"), operator_key="op1")
    (summary,) = list_runs(second)
    assert (summary.run_id, summary.status, summary.batches_committed, summary.rows_committed) == (
        run.run_id,
        "succeeded",
        2,
        3,
    )
    assert summary.usage == LLMUsage(calls=3, dollars=1.5)
    detail = show_run(second, run.run_id)
    assert detail.plan == PLAN and detail.config == {"batch_size": 2} and detail.error_count == 1
    assert not (tmp_path / "b" / "runs").exists(), "reading needs no local copy"
    store = open_store(uri)
    assert [segment.seq for segment in store.segments(run.run_id)] == list(
        range(1, len(store.segments(run.run_id)) + 1)
    )
    assert b"".join(store.read(s.path) for s in store.segments(run.run_id)) == (run.path / JOURNAL_NAME).read_bytes()
    twice = {path for path, count in ObjectStoreLike.writes.items() if count > 1}
    assert {path.rsplit("/", 1)[1] for path in twice} == {LEASE_NAME}, "every other object is written once"
    assert any("/batches/" in path for path in ObjectStoreLike.writes)


def test_an_interrupted_run_resumes_on_another_machine_without_paying_twice(tmp_path: Path, uri: str) -> None:
    first, second = machine(tmp_path, "a", uri), machine(tmp_path, "b", uri)
    run = begin_run(first, PLAN, None)
    big = commit(run, "a", "b", payload="y" * 100_000)
    run.close()  # the driver went away: no final status, its lease released
    assert list_runs(second)[0].status == "interrupted"

    resumed = resume_run(second, run.run_id)
    assert resumed.attempt == 2
    found = resumed.lookup("op1", big)
    assert found is not None and found.column("answer").to_pylist() == ["y" * 100_000] * 2
    commit(resumed, "c")
    resumed.finish("succeeded")

    for settings in (first, second):  # the first machine's stale copy gives way to the store's
        (summary,) = list_runs(settings)
        assert (summary.status, summary.attempts, summary.rows_committed) == ("succeeded", 2, 3)
        assert summary.usage == LLMUsage(calls=3, dollars=1.5)
        assert show_run(settings, run.run_id).status == "succeeded"


def test_commits_after_the_last_copy_are_copied_by_the_next_writer(tmp_path: Path, uri: str) -> None:
    first, second = machine(tmp_path, "a", uri), machine(tmp_path, "b", uri)
    run = begin_run(first, PLAN, None)
    commit(run, "a")
    run.close()
    # A line the copy never saw (its writer died between the commit and the next copy).
    JournalWriter(run.path / JOURNAL_NAME).append(ErrorRecorded(attempt=1, error_type="late", message="after"))
    assert list_runs(second)[0].error_count == 0
    with resume_run(first, run.run_id):
        pass
    detail = show_run(second, run.run_id)
    assert (detail.status, detail.error_count, detail.rows_committed) == ("succeeded", 1, 1)


def test_a_live_writer_keeps_the_run_from_other_machines(tmp_path: Path, uri: str) -> None:
    first, second = machine(tmp_path, "a", uri), machine(tmp_path, "b", uri)
    run = begin_run(first, PLAN, None)
    assert list_runs(second)[0].status == "running"
    with pytest.raises(RunInUseError, match="lease"):
        resume_run(second, run.run_id)
    run.close()
    with resume_run(second, run.run_id) as resumed:
        assert resumed.attempt == 2


def test_a_second_writer_stops_the_first_and_two_histories_are_refused(tmp_path: Path, uri: str) -> None:
    settings = machine(tmp_path, "a", uri)
    run = begin_run(settings, PLAN, None)
    store = open_store(uri)
    # Another machine's writer, past every check, wrote the run's next segment.
    other = ErrorRecorded(attempt=2, error_type="other", message="elsewhere").model_dump_json().encode() + b"\n"
    store.write(store.run_path(run.run_id, SEGMENTS, "0000000002-zz.jsonl"), other)
    with pytest.raises(StoreWriterConflictError, match="zz"):
        run.record_error("mine")
    with pytest.raises(StoreWriterConflictError):
        run.record_error("still mine")
    assert (run.path / JOURNAL_NAME).read_bytes().count(b"mine") == 2, "the local journal keeps its commits"
    # Both wrote segment 2: a reader refuses the run rather than pick one history.
    store.write(store.run_path(run.run_id, SEGMENTS, "0000000002-yy.jsonl"), other)
    with pytest.raises(TransactionError, match="two writers wrote segment 2"):
        show_run(machine(tmp_path, "b", uri), run.run_id)
    assert list_runs(machine(tmp_path, "c", uri)) == []
    run._lock_fd, fd = None, run._lock_fd  # leave without a final copy: this writer is fenced off
    assert fd is not None
    from semray.transactions.durability import release_lock

    release_lock(fd)


def test_a_cancel_from_another_machine_reaches_the_live_driver(tmp_path: Path, uri: str) -> None:
    first, second = machine(tmp_path, "a", uri, sync_s=0.05), machine(tmp_path, "b", uri, sync_s=0.05)
    run = begin_run(first, PLAN, None)
    assert cancel_run(second, run.run_id) == "running"
    deadline = time.monotonic() + 10
    while not run.is_cancelled() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run.is_cancelled()
    run.finish("cancelled", "cancel requested")
    assert list_runs(second)[0].status == "cancelled"
    with resume_run(first, run.run_id) as resumed:  # a resume forgets the stop asked of the attempt before
        time.sleep(0.3)
        assert not resumed.is_cancelled()


def test_a_live_run_is_cancelled_on_its_own_machine(tmp_path: Path, uri: str) -> None:
    settings = machine(tmp_path, "a", uri)
    run = begin_run(settings, PLAN, None)
    assert cancel_run(settings, run.run_id) == "running"  # its live lease is its own: no RunInUseError
    assert run.is_cancelled()
    run.finish("cancelled", "cancel requested")


def test_a_driverless_run_is_cancelled_from_another_machine(tmp_path: Path, uri: str) -> None:
    first, second = machine(tmp_path, "a", uri), machine(tmp_path, "b", uri)
    run = begin_run(first, PLAN, None)
    run.close()
    assert cancel_run(second, run.run_id) == "cancelled"
    assert list_runs(first)[0].status == "cancelled"


def test_object_store_state_folders_are_still_refused_and_name_the_state_uri(tmp_path: Path) -> None:
    with pytest.raises(StateDirError, match="SEMRAY_STATE_URI"):
        Settings(state_dir="s3://bucket/semray")  # type: ignore[arg-type]
    with pytest.raises(StateDirError, match="not a URI"):
        Settings(state_dir=tmp_path, state_uri="bucket/semray")
    assert Settings(state_dir=tmp_path, state_uri="").state_uri is None


# Workers on other nodes than the driver's (transactions/remote_commits.py). A ledger's node is
# what ``node()`` says (the pipeline's asks Ray); a worker's folder is its own node's state folder,
# which the driver's node does not see.


class OnNode(BatchLedger):
    """A ledger in a process on node ``here`` (the driver's node is ``DRIVER_NODE``)."""

    here = "worker-node"

    def node(self) -> str | None:
        return self.here


class OnDriverNode(OnNode):
    here = "driver-node"


DRIVER_NODE = "driver-node"


def worker_ledger(tmp_path: Path, run: Run, uri: str, attempt: int | None = None) -> OnNode:
    """The run's ledger as an actor on another node holds it: the same run folder path, on a node
    whose state folder (``tmp_path/"worker"``) has no such run."""
    own = tmp_path / "worker" / "runs" / run.run_id
    ledger = OnNode(own, attempt or run.attempt, store_uri=uri, home=DRIVER_NODE)
    assert ledger.away
    return ledger


def answer(ledger: BatchLedger, *row_ids: str, payload: str = "") -> str:
    """`commit` through an actor's ledger."""
    key, table, usage = batch(row_ids, payload)
    ledger.commit("op1", key, row_ids, table, usage)
    return key


def test_a_worker_on_another_node_commits_through_the_store(tmp_path: Path, uri: str) -> None:
    first, second = machine(tmp_path, "a", uri), machine(tmp_path, "b", uri)
    run = begin_run(first, PLAN, None)
    worker = worker_ledger(tmp_path, run, uri)
    answer(worker, "a", "b")
    answer(worker, "c", payload="z" * 100_000)  # a parquet object, stored before its commit object
    assert not (tmp_path / "worker").exists(), "the worker's node needs no copy of the run"
    assert len(commit_names(open_store(uri), run.run_id)) == 2
    # Not merged yet, already final: an actor on the driver's node finds them (a task retried
    # there after the worker's node died pays nothing), and so does the worker itself.
    local = OnDriverNode(run.path, 1, store_uri=uri, home=DRIVER_NODE)
    assert not local.away
    found = local.lookup_rows("op1", ["a", "b", "c", "d"])
    assert found.missing == ("d",) and found.table is not None
    assert sorted(found.table.column("answer").to_pylist()) == ["", "", "z" * 100_000]
    assert worker.lookup_rows("op1", ["a", "c"]).missing == ()
    assert list_runs(second)[0].rows_committed == 3, "another machine counts them before the merge"
    assert b"op1" not in (run.path / JOURNAL_NAME).read_bytes()
    run.record_error("a record of the driver's: its push merges the stored commits first")
    records = read_journal(run.path / JOURNAL_NAME).records
    merged = [record for record in records if isinstance(record, BatchCommitted)]
    assert sorted(len(record.row_ids) for record in merged) == [1, 2]
    assert all(record.origin and record.origin.startswith("commits/") for record in merged)
    assert all((run.path / record.file).is_file() for record in merged if record.file), "tables fetched first"
    run.finish("succeeded")
    detail = show_run(second, run.run_id)
    assert (detail.rows_committed, detail.batches_committed, detail.usage) == (3, 2, LLMUsage(calls=3, dollars=1.5))
    assert show_run(first, run.run_id).usage == detail.usage, "merged once, counted once"
    twice = {path for path, count in ObjectStoreLike.writes.items() if count > 1}
    assert {path.rsplit("/", 1)[1] for path in twice} == {LEASE_NAME}


def test_a_commit_on_the_drivers_node_is_in_the_store_at_commit_time(tmp_path: Path, uri: str) -> None:
    first, second = machine(tmp_path, "a", uri, sync_s=3600.0), machine(tmp_path, "b", uri)
    run = begin_run(first, PLAN, None)
    commit(run, "a")  # the driver's own ledger
    actor = OnDriverNode(run.path, 1, store_uri=uri, home=DRIVER_NODE)
    answer(actor, "b", "c", payload="z" * 100_000)  # an actor on the driver's node; a parquet table
    store = open_store(uri)
    assert len(commit_names(store, run.run_id)) == 2, "each commit is an object as soon as it is journaled"
    assert not [r for r in store.records(run.run_id)[0] if isinstance(r, BatchCommitted)], "and no push ran"
    # Before any push: a worker on another node, and another machine, see them.
    assert worker_ledger(tmp_path, run, uri).lookup_rows("op1", ["a", "b", "c", "d"]).missing == ("d",)
    assert list_runs(second)[0].rows_committed == 3
    run.record_error("a push, which merges the store's commit objects first")
    records = read_journal(run.path / JOURNAL_NAME).records
    assert len([r for r in records if isinstance(r, BatchCommitted)]) == 2, "never merged over its own record"
    run.finish("succeeded")
    assert show_run(second, run.run_id).usage == LLMUsage(calls=3, dollars=1.5)
    twice = {path for path, count in ObjectStoreLike.writes.items() if count > 1}
    assert {path.rsplit("/", 1)[1] for path in twice} == {LEASE_NAME}, "the push does not copy the table again"


def test_a_resume_from_the_store_pays_nothing_a_worker_stored_after_its_driver_died(tmp_path: Path, uri: str) -> None:
    first, second = machine(tmp_path, "a", uri), machine(tmp_path, "b", uri)
    run = begin_run(first, PLAN, None)
    commit(run, "a")  # the driver's node: journal, then a segment
    run.close()  # the driver is gone (its node's folder with it, for all the next machine knows)
    worker = worker_ledger(tmp_path, run, uri)
    answer(worker, "b", "c")  # its batch in flight finishes after the driver's last merge
    assert list_runs(second)[0].usage.calls == 3
    resumed = resume_run(second, run.run_id)
    assert resumed.attempt == 2
    ledger = OnDriverNode(resumed.path, 2, store_uri=uri, home=DRIVER_NODE)
    assert ledger.lookup_rows("op1", ["a", "b", "c", "d"]).missing == ("d",), "only d is paid again"
    # The orphan keeps going: the store's fence stops it before its next call, and a commit it
    # stored anyway is refused (counted as paid, never as committed).
    with pytest.raises(FencedWriterError):
        worker.raise_if_fenced()
    orphan = worker_ledger(tmp_path, run, uri, attempt=1)
    with pytest.raises(FencedWriterError):
        answer(orphan, "d")
    assert ledger.lookup_rows("op1", ["d"]).missing == ("d",)
    answer(worker_ledger(tmp_path, resumed, uri), "d")  # attempt 2's worker
    resumed.finish("succeeded")
    for settings in (first, second):
        detail = show_run(settings, run.run_id)
        assert (detail.status, detail.rows_committed, detail.batches_committed) == ("succeeded", 4, 3)
        assert (detail.usage.calls, detail.batches_refused, detail.refused_usage.calls) == (4, 1, 1)
    records = read_journal(resumed.path / JOURNAL_NAME).records
    kinds = [record.kind for record in records]
    assert kinds.index("batch_refused") > kinds.index("run_resumed")
    assert [r.kind for r in records[: kinds.index("run_resumed")]].count("batch_committed") == 2


def test_a_stop_asked_on_the_driver_reaches_workers_on_other_nodes(tmp_path: Path, uri: str) -> None:
    from semray.pipeline.runs.actor_ledger import CancellableLedger

    class CancellableOnNode(CancellableLedger):
        def node(self) -> str | None:
            return "worker-node"

    run = begin_run(machine(tmp_path, "a", uri, sync_s=0.05), PLAN, None)
    worker = CancellableOnNode(tmp_path / "worker" / run.run_id, 1, store_uri=uri, home=DRIVER_NODE)
    assert worker.lookup_rows("op1", ["a"]).missing == ("a",)
    run.request_stop("stopped: cost $1 reached the budget $1")
    deadline = time.monotonic() + 10
    while open_store(uri).cancel_requested(run.run_id) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(RunCancelledError, match="reached the budget"):
        worker.lookup_rows("op1", ["a"])
    run.finish("cancelled", "stopped")


def test_runs_watch_follows_a_run_from_the_store(tmp_path: Path, uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse
    import threading

    from semray.cli_runs import add_runs_commands

    first, second = machine(tmp_path, "a", uri, sync_s=0.1), machine(tmp_path, "b", uri, sync_s=0.1)
    run = begin_run(first, PLAN, None, config={"operator_labels": {"op1": "SemFilter 'x'"}})
    run.record_estimates({}, expected_rows=4, expected_dollars=2.0)

    def drive() -> None:
        for rows in (("a", "b"), ("c", "d")):
            time.sleep(0.4)
            commit(run, *rows)
        run.finish("succeeded")

    thread = threading.Thread(target=drive)
    thread.start()
    parser = argparse.ArgumentParser(prog="semray")
    add_runs_commands(parser.add_subparsers(required=True))
    args = parser.parse_args(["runs", "watch", run.run_id, "--interval", "0.1"])
    code = args.command(args, second)
    thread.join()
    assert code == 0
    assert not (tmp_path / "b" / "runs").exists(), "watched from the store, not a local copy"
    said = capsys.readouterr().err
    assert f"run {run.run_id} succeeded" in said
    assert "4/4 rows (100%), 4 calls" in said
