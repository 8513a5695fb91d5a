"""SIGKILL a run at seeded random durability syscalls, resume it, and check what survives.

Each child process is one attempt of the same run (``open_run`` resumes it); it kills
itself at a random counted syscall (sometimes mid-write, leaving a torn journal line).
After every kill: the journal reads, the committed batches are exactly the ones fully
journaled (every acknowledged commit is there, nothing that was never computed), each
committed batch reads back intact, and the output is either absent/previous or complete.
"""

from __future__ import annotations

import importlib.util
import random
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from semray.settings import Settings
from semray.transactions import begin_run, list_runs, read_journal
from semray.transactions.records import BatchCommitted

CHILD = Path(__file__).with_name("crash_child.py")


def _load_child() -> ModuleType:
    # Loaded by path: the test folders are not packages.
    spec = importlib.util.spec_from_file_location("semray_crash_child", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


child = _load_child()
BATCHES: int = child.BATCHES
expected_output = child.expected_output


@dataclass
class Attempt:
    returncode: int
    lines: list[str]

    def indexes(self, word: str) -> set[int]:
        return {int(line.split()[1]) for line in self.lines if line.startswith(word + " ")}


@dataclass
class History:
    computed: list[int] = field(default_factory=list)
    acked: set[int] = field(default_factory=set)
    kills: int = 0


def run_child(state: Path, output: Path, kill_at: int, seed: int) -> Attempt:
    done = subprocess.run(
        [sys.executable, str(CHILD), str(state), str(output), str(kill_at), str(seed)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return Attempt(done.returncode, done.stdout.splitlines())


def committed_in_journal(state: Path) -> dict[str, BatchCommitted]:
    runs = sorted((state / "runs").iterdir()) if (state / "runs").exists() else []
    run_dirs = [path for path in runs if not path.name.startswith(".")]
    # None when killed before the run was created; never two: every attempt resumes the one run.
    assert len(run_dirs) <= 1
    if not run_dirs:
        return {}
    read = read_journal(run_dirs[0] / "journal.jsonl")
    return {record.batch_key: record for record in read.records if isinstance(record, BatchCommitted)}


def output_table(output: Path) -> pa.Table | None:
    if not output.exists():
        return None
    return pq.read_table(output)


def prepare_previous_version(output: Path, settings: Settings) -> pa.Table:
    previous = pa.table({"_rowid": ["old"], "score": [-1]})
    with begin_run(settings, {"op": "an older plan"}, output) as run:
        run.publish(previous)
    return previous


@pytest.mark.parametrize(("kind", "seed"), [("file", 0), ("folder", 1), ("file", 2)])
def test_sigkill_at_random_points_then_resume(tmp_path: Path, kind: str, seed: int) -> None:
    rng = random.Random(seed)
    state = tmp_path / "state"
    output = tmp_path / ("result.parquet" if kind == "file" else "result")
    previous = prepare_previous_version(output, Settings(state_dir=tmp_path / "old-state"))
    expected = expected_output()
    history = History()
    for _ in range(6):
        attempt = run_child(state, output, kill_at=rng.randint(1, 50), seed=rng.randrange(1 << 30))
        history.computed.extend(sorted(attempt.indexes("computed")))
        history.acked |= attempt.indexes("acked")
        committed = committed_in_journal(state)
        committed_indexes = {int(record.row_ids[0][1:]) // 4 for record in committed.values()}
        # Exactly the fully journaled batches: all acknowledged ones, none never computed.
        assert history.acked <= committed_indexes <= set(history.computed)
        seen = output_table(output)
        assert seen is None or seen.equals(previous) or seen.equals(expected), "partial or mixed output"
        if attempt.returncode == 0:
            assert seen is not None and seen.equals(expected)
            break
        history.kills += 1
        runs = list_runs(Settings(state_dir=state))
        if runs and runs[0].status == "succeeded":
            # Killed after the publish landed: the run is done; its output must be complete.
            assert seen is not None and seen.equals(expected)
            break
    else:
        attempt = run_child(state, output, kill_at=0, seed=0)
        assert attempt.returncode == 0
        history.computed.extend(attempt.indexes("computed"))
        final = output_table(output)
        assert final is not None and final.equals(expected)
    # Paid at most once per batch, plus at most one in-flight batch per kill.
    assert len(history.computed) <= BATCHES + history.kills
    assert set(history.computed) == set(range(BATCHES))
    staging = output.with_name(f".{output.name}.semray") / "staging"
    assert list(staging.iterdir()) == [], "no attempt's staging is left behind"
    summary = list_runs(Settings(state_dir=state))[0]
    assert summary.status == "succeeded"
    assert summary.batches_committed == BATCHES
    print(f"kind={kind} seed={seed} kills={history.kills} batch computations={len(history.computed)} for {BATCHES}")


def test_child_without_faults_commits_every_batch_once(tmp_path: Path) -> None:
    attempt = run_child(tmp_path / "state", tmp_path / "out.parquet", kill_at=0, seed=0)
    assert attempt.returncode == 0
    assert attempt.indexes("acked") == set(range(BATCHES))
    assert pq.read_table(tmp_path / "out.parquet").equals(expected_output())
    (summary,) = list_runs(Settings(state_dir=tmp_path / "state"))
    assert (summary.status, summary.batches_committed, summary.usage.calls) == ("succeeded", BATCHES, BATCHES * 4)
