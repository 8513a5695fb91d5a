"""Isolation: concurrent runs publishing to one output never interleave rows.

The rule is optimistic commit: of runs that overlap in time, the first to publish wins;
any other whose base version is stale gets ``TransactionConflictError`` and publishes
nothing. Processes are forked so each round costs milliseconds, not an interpreter start.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import os
import traceback
from pathlib import Path

import pyarrow as pa

# Imported up front: its lazy first import (on the first folder read) outlasts all the publishes.
import pyarrow.dataset
import pyarrow.parquet as pq
import pytest

from semray.settings import Settings
from semray.transactions import TransactionConflictError, begin_run, read_output

CONTEXT = multiprocessing.get_context("fork")
ROWS = 200


def writer_table(writer: int) -> pa.Table:
    return pa.table({"_rowid": [f"w{writer}-{row}" for row in range(ROWS)], "writer": [writer] * ROWS})


def publish_after_barrier(
    state: str, output: str, writer: int, barrier: multiprocessing.synchronize.Barrier, results: multiprocessing.Queue
) -> None:
    settings = Settings(state_dir=Path(state))
    try:
        with begin_run(settings, {"writer": writer}, output) as run:
            barrier.wait(timeout=30)  # both runs have read the same base version
            run.publish(writer_table(writer))
        results.put((writer, "published"))
    except TransactionConflictError:
        results.put((writer, "conflict"))
    except BaseException:
        results.put((writer, traceback.format_exc()))
        raise


@pytest.mark.parametrize("name", ["result.parquet", "result"])
def test_two_concurrent_publishers_first_committer_wins(tmp_path: Path, name: str) -> None:
    output = tmp_path / name
    for round_ in range(4):
        barrier = CONTEXT.Barrier(2)
        results: multiprocessing.Queue = CONTEXT.Queue()
        writers = [
            CONTEXT.Process(
                target=publish_after_barrier,
                args=(str(tmp_path / "state"), str(output), 2 * round_ + index, barrier, results),
            )
            for index in range(2)
        ]
        for process in writers:
            process.start()
        outcomes = dict(results.get(timeout=60) for _ in writers)
        for process in writers:
            process.join(timeout=30)
        assert sorted(outcomes.values()) == ["conflict", "published"], outcomes
        assert [process.exitcode for process in writers] == [0, 0]
        (winner,) = [writer for writer, outcome in outcomes.items() if outcome == "published"]
        assert pq.read_table(output).equals(writer_table(winner)), "only the winner's rows, all of them"


def publish_sequentially(state: str, output: str, versions: int, done: multiprocessing.synchronize.Event) -> None:
    settings = Settings(state_dir=Path(state))
    for writer in range(versions):
        with begin_run(settings, {"writer": writer}, output) as run:
            staged = run.staging_path()
            half = ROWS // 2
            if staged.is_dir():
                # Two files per version, so a reader mixing versions would show two writers.
                pq.write_table(writer_table(writer).slice(0, half), staged / "part-0.parquet")
                pq.write_table(writer_table(writer).slice(half), staged / "part-1.parquet")
            else:
                pq.write_table(writer_table(writer), staged, row_group_size=half)
            run.publish()
    done.set()


def writers_of(seen: pa.Table) -> set[int]:
    return set(seen.column("writer").to_pylist()) if seen.num_columns else set()


@pytest.mark.parametrize("name", ["result", "result.parquet"])
def test_readers_never_see_two_versions_or_a_partial_one(tmp_path: Path, name: str) -> None:
    output = tmp_path / name
    done = CONTEXT.Event()
    writer = CONTEXT.Process(target=publish_sequentially, args=(str(tmp_path / "state"), str(output), 20, done))
    writer.start()
    snapshots = naive_whole = naive_straddled = 0
    while not done.is_set() or snapshots == 0:
        if not os.path.lexists(output):
            continue
        # read_output resolves the output once: always one whole version.
        seen = read_output(output)
        assert seen.num_rows == ROWS and len(writers_of(seen)) == 1
        snapshots += 1
        # A naive reader resolving the path per file may straddle a swap: it may fail or, for a
        # folder, get an empty listing from pyarrow, but never rows of two versions or a part of one.
        try:
            naive = pq.read_table(output)
        except (OSError, pa.ArrowInvalid):
            naive_straddled += 1
            continue
        if naive.num_rows == 0:
            naive_straddled += 1
            continue
        assert naive.num_rows == ROWS and len(writers_of(naive)) == 1
        naive_whole += 1
    writer.join(timeout=60)
    assert writer.exitcode == 0
    print(f"{name}: snapshot reads={snapshots} naive whole={naive_whole} naive straddled={naive_straddled}")
