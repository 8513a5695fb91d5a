"""A driver that commits batches of a run copied to an object store, then SIGKILLs itself before its
next push; driven by ``test_store_sigkill.py``.

Usage: store_crash_child.py STATE_DIR KILL_AFTER

The store comes from the environment (``SEMRAY_STATE_URI``, ``SEMRAY_STATE_ENDPOINT``,
``SEMRAY_STATE_SYNC_S``: a long interval, so that no push copies the commits). It begins a run,
pays for and commits batches ``0 .. KILL_AFTER-1`` on the driver's node (its own ledger, as a
driver-side operator does, and a ledger standing for a semantic actor on the driver's node, taking
turns), then kills itself with SIGKILL. It prints:

    run RUN_ID             the run it began
    paid I N               about to pay N model calls for batch I
    acked I                the commit of batch I returned
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pyarrow as pa

from semray.settings import Settings
from semray.transactions import BatchLedger, LLMUsage, batch_key, begin_run
from semray.transactions.batches import INLINE_BYTES

BATCHES = 6
ROWS_PER_BATCH = 4
OPERATOR = "sem_map-1"
PLAN = {"op": "sem_map", "prompt": "score {text}", "input": {"op": "scan", "source": "reviews"}}
DRIVER_NODE = "driver-node"


def batch_rows(index: int) -> list[str]:
    return [f"r{index * ROWS_PER_BATCH + offset:03d}" for offset in range(ROWS_PER_BATCH)]


def batch_table(index: int) -> pa.Table:
    """Even batches travel inline in their record, odd ones past ``INLINE_BYTES`` as a parquet file."""
    rows = batch_rows(index)
    notes = ["x" * (INLINE_BYTES + 1) if index % 2 and offset == 0 else "" for offset in range(len(rows))]
    return pa.table({"_rowid": rows, "score": [len(row) * (index + 1) for row in rows], "note": notes})


def usage(index: int) -> LLMUsage:
    return LLMUsage(calls=len(batch_rows(index)), dollars=0.001 * len(batch_rows(index)))


class OnDriverNode(BatchLedger):
    """A semantic actor's ledger in another process on the driver's node."""

    def node(self) -> str | None:
        return DRIVER_NODE


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def main() -> None:
    state_dir, kill_after = Path(sys.argv[1]), int(sys.argv[2])
    settings = Settings(state_dir=state_dir)
    assert settings.state_uri, "SEMRAY_STATE_URI must name the store"
    run = begin_run(settings, PLAN, None)
    say(f"run {run.run_id}")
    actor = OnDriverNode(run.path, run.attempt, store_uri=run.ledger.store_uri, home=DRIVER_NODE)
    assert not actor.away
    for index in range(kill_after):
        rows = batch_rows(index)
        say(f"paid {index} {usage(index).calls}")
        ledger = run.ledger if index % 2 == 0 else actor
        ledger.commit(OPERATOR, batch_key(OPERATOR, rows), rows, batch_table(index), usage(index))
        say(f"acked {index}")
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
