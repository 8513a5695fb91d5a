"""A run that SIGKILLs itself at a chosen durability syscall; driven by test_crash.py.

Usage: crash_child.py STATE_DIR OUTPUT KILL_AT SEED

Every ``os.write``/``os.fsync``/``os.replace``/``os.rename``/``os.link`` call is counted; at
call number KILL_AT (0: never) the process kills itself with SIGKILL, just before the call
or, for a write, after writing a seeded random prefix of it (a torn write). It prints:

    attempt RUN_ID N       the attempt it is
    computed I             about to pay for batch I
    acked I                commit_batch(I) returned
    published VERSION      publish() returned
    syscalls N             (only when it finishes) how many counted calls it made
"""

from __future__ import annotations

import os
import random
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from semray.settings import Settings
from semray.transactions import LLMUsage, batch_key, open_run
from semray.transactions.batches import INLINE_BYTES

BATCHES = 6
ROWS_PER_BATCH = 4
OPERATOR = "sem_map-1"
PLAN = {"op": "sem_map", "prompt": "score {text}", "input": {"op": "scan", "source": "reviews"}}


def batch_rows(index: int) -> list[str]:
    return [f"r{index * ROWS_PER_BATCH + offset:03d}" for offset in range(ROWS_PER_BATCH)]


def batch_table(index: int) -> pa.Table:
    """Even batches small enough to travel in their journal record, odd ones over ``INLINE_BYTES``
    (stored in a parquet file): the kills hit both ways of committing."""
    rows = batch_rows(index)
    notes = ["x" * (INLINE_BYTES + 1) if index % 2 and offset == 0 else "" for offset in range(len(rows))]
    return pa.table({"_rowid": rows, "score": [len(row) * (index + 1) for row in rows], "note": notes})


def expected_output() -> pa.Table:
    return pa.concat_tables([batch_table(index) for index in range(BATCHES)])


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


class Faults:
    def __init__(self, kill_at: int, seed: int) -> None:
        self.kill_at = kill_at
        self.calls = 0
        self.random = random.Random(seed)

    def wrap(self, name: str) -> None:
        real: Callable[..., Any] = getattr(os, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            # Our own progress lines (fd 1) are not durability calls.
            if name == "write" and args[0] == 1:
                return real(*args, **kwargs)
            self.calls += 1
            if self.calls == self.kill_at:
                if name == "write":
                    data = bytes(args[1])
                    real(args[0], data[: self.random.randrange(len(data) + 1)])
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        setattr(os, name, counted)


def main() -> None:
    state_dir, output, kill_at, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    faults = Faults(kill_at, seed)
    for name in ("write", "fsync", "replace", "rename", "link"):
        faults.wrap(name)
    settings = Settings(state_dir=Path(state_dir))
    with open_run(settings, PLAN, output, config={"seed": seed}) as run:
        say(f"attempt {run.run_id} {run.attempt}")
        tables = []
        for index in range(BATCHES):
            rows = batch_rows(index)
            key = batch_key(OPERATOR, rows)
            table = run.lookup(OPERATOR, key)
            if table is None:
                say(f"computed {index}")
                table = batch_table(index)
                run.commit_batch(OPERATOR, key, rows, table, LLMUsage(calls=len(rows), dollars=0.001 * len(rows)))
                say(f"acked {index}")
            elif not table.equals(batch_table(index)):
                raise SystemExit(f"batch {index} came back different from what was committed")
            tables.append(table)
        version = run.publish(pa.concat_tables(tables))
        say(f"published {version}")
    say(f"syscalls {faults.calls}")


if __name__ == "__main__":
    main()
