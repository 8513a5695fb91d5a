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
    LLMUsage,
    Run,
    RunInUseError,
    TransactionError,
    batch_key,
    begin_run,
    cancel_run,
    list_runs,
    resume_run,
    show_run,
)
from semray.transactions.errors import StoreWriterConflictError
from semray.transactions.journal import JOURNAL_NAME, JournalWriter
from semray.transactions.records import ErrorRecorded
from semray.transactions.remote import LEASE_NAME, SEGMENTS, open_store

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
    key = batch_key("op1", row_ids)
    table = pa.table({"_rowid": list(row_ids), "answer": [payload] * len(row_ids)})
    run.commit_batch("op1", key, row_ids, table, LLMUsage(calls=len(row_ids), dollars=0.5 * len(row_ids)))
    return key


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
