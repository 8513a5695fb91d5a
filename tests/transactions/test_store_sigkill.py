"""A driver SIGKILLed between two pushes to its object store, its state folder lost, resumed elsewhere.

With ``Settings.state_uri`` the driver copies its journal to the store every ``state_sync_s``. The
batches committed on the driver's node since the last copy must not live only in the driver's
folder: here the driver (``store_crash_child.py``) commits a few batches (through its own ledger
and an actor's on its node), is SIGKILLed before any push copied them, and its state folder is
deleted, as when its machine is gone. A resume from a fresh folder, with only the store, must pay
for the batches no one committed and nothing else: the calls of both attempts add up to those of
an uninterrupted run. Run against a ``file://`` store and against moto's S3 server on 127.0.0.1.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from s3_server import S3Server

from semray.settings import Settings
from semray.transactions import batch_key, read_journal, resume_run, show_run
from semray.transactions.journal import JOURNAL_NAME
from semray.transactions.records import BatchCommitted
from semray.transactions.remote import open_store

CHILD = Path(__file__).with_name("store_crash_child.py")
SYNC_S = 2.5
"""Longer than the child takes from its first push to its kill, so no later push copies a commit
(checked); a resume from elsewhere waits out the dead driver's lease, three intervals."""
KILL_AFTER = 4


def _load_child() -> ModuleType:
    spec = importlib.util.spec_from_file_location("semray_store_crash_child", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


child = _load_child()


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The store's settings as the driver's environment carries them."""
    if request.param == "file":
        yield {"SEMRAY_STATE_URI": (tmp_path / "bucket").as_uri()}
        return
    with S3Server.start() as server:
        yield {"SEMRAY_STATE_URI": server.uri(f"{tmp_path.name}/semray"), "SEMRAY_STATE_ENDPOINT": server.endpoint}


def test_driver_node_commits_after_the_last_push_are_not_paid_again_when_its_folder_is_lost(
    tmp_path: Path, store: dict[str, str]
) -> None:
    driver = tmp_path / "driver"
    env = {**os.environ, **store, "SEMRAY_STATE_SYNC_S": str(SYNC_S)}
    done = subprocess.run(
        [sys.executable, str(CHILD), str(driver), str(KILL_AFTER)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, f"the driver did not die by SIGKILL:\n{done.stdout}\n{done.stderr}"
    lines = [line.split() for line in done.stdout.splitlines()]
    (run_id,) = [words[1] for words in lines if words[0] == "run"]
    paid_first = sum(int(words[2]) for words in lines if words[0] == "paid")
    assert {int(words[1]) for words in lines if words[0] == "acked"} == set(range(KILL_AFTER))

    elsewhere = Settings(
        state_dir=tmp_path / "elsewhere",
        state_uri=store["SEMRAY_STATE_URI"],
        state_endpoint=store.get("SEMRAY_STATE_ENDPOINT"),
        state_sync_s=SYNC_S,
    )
    objects = open_store(elsewhere.state_store_uri or "")
    pushed, _ = objects.records(run_id)
    assert not [r for r in pushed if isinstance(r, BatchCommitted)], "a push copied a commit: the case is not tested"
    assert len(read_journal(driver / "runs" / run_id / JOURNAL_NAME).records) == 1 + KILL_AFTER
    shutil.rmtree(driver)  # the driver's machine is gone, and its state folder with it

    lease = objects.lease(run_id)
    assert lease is not None
    time.sleep(max(0.0, lease.expires_at - time.time()) + 0.2)  # a dead driver's lease runs out first
    resumed = resume_run(elsewhere, run_id)
    assert resumed.attempt == 2
    paid_again = 0
    for index in range(child.BATCHES):
        rows = child.batch_rows(index)
        key = batch_key(child.OPERATOR, rows)
        table = resumed.lookup(child.OPERATOR, key)
        if table is None:
            paid_again += child.usage(index).calls
            resumed.commit_batch(child.OPERATOR, key, rows, child.batch_table(index), child.usage(index))
        else:
            assert table.equals(child.batch_table(index)), f"batch {index} came back different"
    resumed.finish("succeeded")

    uninterrupted = sum(child.usage(index).calls for index in range(child.BATCHES))
    assert paid_first + paid_again == uninterrupted, f"paid {paid_first} + {paid_again}, not {uninterrupted}"
    detail = show_run(elsewhere, run_id)
    assert (detail.status, detail.batches_committed, detail.usage.calls) == ("succeeded", child.BATCHES, uninterrupted)
    assert detail.batches_refused == 0
