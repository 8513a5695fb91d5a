"""Runs copied to a real S3 endpoint (moto's S3 server on 127.0.0.1) through pyarrow's S3FileSystem.

``test_remote_state.py`` checks the store's rules on an in-memory object store; this checks them
over S3's wire protocol, as pyarrow speaks it: ``SEMRAY_STATE_URI=s3://bucket/prefix`` with the
endpoint given by ``Settings.state_endpoint`` (or ``AWS_ENDPOINT_URL``). The bucket is versioned, so
every put is a version: an object put twice under one name is seen, where a plain S3 put would
silently replace it. Fake credentials only; every test greps its state folders, the store's
objects and its logs for them.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from s3_server import SECRETS, S3Server

from semray.cli_runs import WATCH_EXIT_CODES, add_runs_commands
from semray.log import configure_logging
from semray.settings import Settings
from semray.transactions import BatchLedger, LLMUsage, Run, batch_key, begin_run, cancel_run, list_runs, resume_run
from semray.transactions.remote import LEASE_NAME, REMOTE_CANCEL, open_store
from semray.transactions.remote_commits import STORE_FENCE, commit_names

PLAN = {"op": "sem_filter", "prompt": "is {review} positive?"}
REWRITTEN = {LEASE_NAME, STORE_FENCE, REMOTE_CANCEL}
"""The only objects put more than once: the lease (renewed), the fence (each resume), a stop."""


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with S3Server.start() as running:
        yield running


@pytest.fixture
def prefix(tmp_path: Path, server: S3Server) -> Iterator[str]:
    """A prefix of its own per test; afterwards: no object but ``REWRITTEN`` was put twice, no credential leaked."""
    name = f"{tmp_path.name}/semray"
    yield name
    twice = {key for key, puts in server.versions(name).items() if puts > 1}
    assert {key.rsplit("/", 1)[1] for key in twice} <= REWRITTEN, f"objects put twice: {sorted(twice)}"
    _assert_no_secret({f"s3://{key}": data for key, data in server.objects(name).items()})
    _assert_no_secret({str(path): path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()})


def _assert_no_secret(files: dict[str, bytes]) -> None:
    for where, data in files.items():
        for secret in SECRETS:
            assert secret.encode() not in data, f"a credential is in {where}"


def machine(tmp_path: Path, name: str, server: S3Server, prefix: str, sync_s: float = 5.0) -> Settings:
    return Settings(
        state_dir=tmp_path / name, state_uri=server.uri(prefix), state_endpoint=server.endpoint, state_sync_s=sync_s
    )


def commit(run: Run, *row_ids: str, payload: str = "") -> str:
    key = batch_key("op1", row_ids)
    table = pa.table({"_rowid": list(row_ids), "answer": [payload] * len(row_ids)})
    run.commit_batch("op1", key, row_ids, table, LLMUsage(calls=len(row_ids), dollars=0.5 * len(row_ids)))
    return key


class OnWorkerNode(BatchLedger):
    """A run's ledger as an actor on another node than its driver's holds it."""

    def node(self) -> str | None:
        return "worker-node"


def runs_cli(settings: Settings, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="semray")
    add_runs_commands(parser.add_subparsers(required=True))
    args = parser.parse_args(["runs", *argv])
    return int(args.command(args, settings))


def test_a_run_in_s3_resumes_from_a_fresh_state_folder_paying_only_what_no_one_committed(
    tmp_path: Path, server: S3Server, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("debug", "json")
    first, second = machine(tmp_path, "a", server, prefix), machine(tmp_path, "b", server, prefix)
    run = begin_run(first, PLAN, None)
    assert run.ledger.store_uri == first.state_store_uri and "endpoint_override=" in (run.ledger.store_uri or "")
    commit(run, "a")
    commit(run, "b", payload="x" * 100_000)  # past INLINE_BYTES: a parquet object before its segment
    # An actor on a worker node: its commits are write-once objects, its table stored first.
    worker = OnWorkerNode(tmp_path / "w" / run.run_id, 1, store_uri=run.ledger.store_uri, home="driver-node")
    key = batch_key("op1", ("c", "d"))
    table = pa.table({"_rowid": ["c", "d"], "answer": ["y" * 100_000] * 2})
    worker.commit("op1", key, ("c", "d"), table, LLMUsage(calls=2, dollars=1.0))
    run.close()  # the driver went away before merging the worker's commit: no final status

    keys = set(server.objects(prefix))
    runs = f"{prefix}/runs/{run.run_id}"
    assert {k for k in keys if k.startswith(f"{runs}/segments/")}, "the journal is in S3 as segments"
    names = commit_names(open_store(second.state_store_uri or ""), run.run_id)
    # One object per commit: the worker's, and the driver's two, stored at commit time as well as journaled.
    assert sorted(name.startswith("worker-node") for name in names) == [False, False, True]
    assert len([k for k in keys if k.startswith(f"{runs}/batches/") and k.endswith(".parquet")]) == 2

    assert runs_cli(second, "ls") == 0
    listed = capsys.readouterr().out
    assert run.run_id in listed and "interrupted" in listed
    assert not (tmp_path / "b" / "runs").exists(), "`runs ls` read S3, no local copy"

    resumed = resume_run(second, run.run_id)  # a fresh state folder: everything comes from S3
    assert resumed.attempt == 2
    found = resumed.ledger.lookup_rows("op1", ["a", "b", "c", "d", "e"])
    assert found.missing == ("e",), "only e is paid again"
    commit(resumed, "e")
    resumed.finish("succeeded")
    for settings in (first, second):
        (summary,) = list_runs(settings)
        assert (summary.status, summary.attempts, summary.rows_committed) == ("succeeded", 2, 5)
        assert summary.usage == LLMUsage(calls=5, dollars=2.5), "each row paid once"
    assert int(server.objects(runs)[f"{runs}/{STORE_FENCE}"]) == 2
    _assert_no_secret({"logs": capsys.readouterr().err.encode()})


def test_the_cancel_object_in_s3_stops_the_live_driver_and_runs_watch_follows_it(
    tmp_path: Path, server: S3Server, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("debug", "json")
    first, second = (machine(tmp_path, name, server, prefix, sync_s=0.1) for name in ("a", "b"))
    run = begin_run(first, PLAN, None, config={"operator_labels": {"op1": "SemFilter 'x'"}})
    run.record_estimates({}, expected_rows=4, expected_dollars=2.0)
    stopped = threading.Event()

    def drive() -> None:
        commit(run, "a", "b")
        deadline = time.monotonic() + 15
        while not run.is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.05)
        if run.is_cancelled():
            stopped.set()
        run.finish("cancelled", "cancel requested")

    thread = threading.Thread(target=drive)
    thread.start()
    time.sleep(0.3)
    assert cancel_run(second, run.run_id) == "running"
    stop = f"{prefix}/runs/{run.run_id}/{REMOTE_CANCEL}"
    assert stop in server.objects(prefix), "the stop is an object in S3"
    assert runs_cli(second, "watch", run.run_id, "--interval", "0.1") == WATCH_EXIT_CODES["cancelled"]
    thread.join()
    assert stopped.is_set(), "the driver saw the CANCEL object"
    said = capsys.readouterr()
    assert f"run {run.run_id} cancelled" in said.err and "2/4 rows" in said.err
    assert not (tmp_path / "b" / "runs").exists(), "watched from S3"
    _assert_no_secret({"logs": (said.out + said.err).encode()})
    with resume_run(second, run.run_id) as resumed:  # a resume forgets the stop of the attempt before
        assert not resumed.is_cancelled()
    assert stop not in server.objects(prefix)


def test_the_endpoint_comes_from_aws_endpoint_url_without_the_setting(
    tmp_path: Path, server: S3Server, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pyarrow >= 26 (checked here) sends S3 requests to AWS_ENDPOINT_URL when no endpoint_override is given.
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    settings = Settings(state_dir=tmp_path / "a", state_uri=server.uri(prefix))
    assert settings.state_store_uri == server.uri(prefix)
    with begin_run(settings, PLAN, None) as run:
        commit(run, "a")
    assert any(key.startswith(f"{prefix}/runs/{run.run_id}/segments/") for key in server.objects(prefix))


def test_a_second_put_of_one_name_is_seen(tmp_path: Path, server: S3Server) -> None:
    # What the ``prefix`` fixture checks after each test can fail: a put over an existing object.
    elsewhere = f"{tmp_path.name}/twice"
    store = open_store(machine(tmp_path, "a", server, elsewhere).state_store_uri or "")
    path = store.run_path("20260101-000000-000000", "commits", "n1w1-00000001.jsonl")
    store.write(path, b"{}\n")
    assert set(server.versions(elsewhere).values()) == {1}
    store.write(path, b"{}\n")
    assert server.versions(elsewhere)[path.split("/", 1)[1]] == 2


def test_an_endpoint_is_refused_for_a_store_that_takes_none(tmp_path: Path) -> None:
    from semray.errors import StateDirError

    with pytest.raises(StateDirError, match="only s3:// and gs://"):
        Settings(state_dir=tmp_path, state_uri="file:///tmp/x", state_endpoint="http://127.0.0.1:9000")
    with pytest.raises(StateDirError, match="http"):
        Settings(state_dir=tmp_path, state_uri="s3://b/p", state_endpoint="127.0.0.1:9000")
