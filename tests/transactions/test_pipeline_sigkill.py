"""SIGKILL the driver of a local Ray run at seeded random points, resume, and compare with a clean run.

One run of a semantic query (filter, then classify) over 200 demo reviews, written to
Parquet on a slow simulated tier with the response cache off. Its driver (and right after
it the Ray processes it started) is SIGKILLed three times, each once its attempt has
committed a seeded random number of batches, plus a seeded random delay (so kills land
mid-batch). Attempt 2 resumes through ``semray runs resume ID``
(the journaled plan, settings and serving configuration); attempts 3 and 4 resume
automatically by re-running the same plan to the same output. After each
kill nothing is visible under the output name. The last attempt finishes, and the same
process then writes the query again, uninterrupted, to another path.

Checked: the published output equals the uninterrupted run's as a multiset keyed by row
id; both runs used the same operator keys (hashes of the plan, computed in different
processes); and the last resume paid no more model calls than the rows of the batches not
yet committed when it started (the figure is printed; run with -s to see it).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from semray.demo import corpus
from semray.settings import Settings
from semray.transactions import RunDetail, list_runs, read_output, show_run

# Five driver processes, each starting its own Ray, Serve tier and actors: about 2 minutes
# on an idle 2-core machine, several times that on a loaded one.
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

CHILD = Path(__file__).with_name("pipeline_child.py")
ROWS = 200
SEED = 6
KILLS = 3
ATTEMPT_TIMEOUT_S = 300.0
MARK = "written: "
"""What the child prints before each result line."""


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Short and under /tmp: each child's Ray keeps Unix sockets below the state folder.
    with tempfile.TemporaryDirectory(prefix="srk-", dir="/tmp", ignore_cleanup_errors=True) as folder:
        yield Path(folder)


def test_sigkilled_runs_resume_to_the_uninterrupted_result(workdir: Path) -> None:
    data, state, out = workdir / "data", workdir / "s", workdir / "out"
    corpus.write(data, rows=ROWS)
    out.mkdir()
    output, baseline = out / "result.parquet", out / "baseline.parquet"
    settings = Settings(state_dir=state)
    rng = random.Random(SEED)
    kill_points, figures = [], []
    run_id: str | None = None
    for kill in range(KILLS):
        # A seeded random number of batches this attempt commits, then a seeded random delay.
        start = show_run(settings, run_id).batches_committed if run_id else 0
        threshold, delay = start + rng.randint(3, 8), rng.uniform(0.0, 0.1)
        kill_points.append((threshold, round(delay, 3)))
        if kill == 1 and run_id is not None:
            command = ["resume", str(state), run_id]
        else:
            command = ["run", str(state), str(data), str(output)]
        run_id = _run_until_killed(command, settings, run_id, attempt=kill + 1, threshold=threshold, delay=delay)
        detail = show_run(settings, run_id)
        assert detail.status == "interrupted", detail.final_message
        assert not os.path.lexists(output), "a killed run left something under the output name"
        assert [entry.name for entry in out.iterdir() if not entry.name.startswith(".")] == []
        figures.append({"attempt": kill + 1, "batches_before": start, "batches_after_kill": detail.batches_committed})
    assert run_id is not None
    before = show_run(settings, run_id)
    lines = _run_child(["run", str(state), str(data), str(output), str(baseline)], workdir)
    resumed, clean = (json.loads(line) for line in lines)
    assert resumed["run_id"] == run_id, "re-running the plan to the same output resumes the interrupted run"
    after, reference = show_run(settings, run_id), show_run(settings, clean["run_id"])
    assert (after.status, after.attempts) == ("succeeded", KILLS + 1)

    published, expected = read_output(output), read_output(baseline)
    assert published.num_rows == expected.num_rows > 0
    ids = published.column("_rowid").to_pylist()
    assert len(set(ids)) == len(ids)
    assert _keyed(published) == _keyed(expected)

    committed_keys = {operator.operator_key for operator in after.operators}
    assert committed_keys == {operator.operator_key for operator in reference.operators}, "operator keys differ"
    uncommitted = _uncommitted_rows(before, reference)
    paid = after.usage.calls - before.usage.calls
    assert paid == resumed["attempt_calls"]
    assert paid <= uncommitted, f"the resume paid {paid} calls for {uncommitted} uncommitted rows"
    figures.append({"attempt": KILLS + 1, "uncommitted_rows": uncommitted, "paid_calls": paid})
    summary = {
        "kill_points": kill_points,
        "attempts": figures,
        "clean_run_calls": reference.usage.calls,
        "all_attempts_calls": after.usage.calls,
    }
    sys.stdout.write("sigkill resume figures: " + json.dumps(summary) + "\n")


def _run_until_killed(
    command: list[str], settings: Settings, run_id: str | None, attempt: int, threshold: int, delay: float
) -> str:
    """Start a child, wait until the run has ``threshold`` committed batches, then SIGKILL the driver."""
    log_path = settings.state_path.parent / f"attempt-{attempt}.log"
    log = log_path.open("wb")
    child = subprocess.Popen([sys.executable, str(CHILD), *command], stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + ATTEMPT_TIMEOUT_S
    try:
        while True:
            if child.poll() is not None:
                tail = log_path.read_text(errors="replace")[-3000:]
                pytest.fail(f"attempt {attempt} ended (rc {child.returncode}) before {threshold} batches:\n{tail}")
            if time.monotonic() > deadline:
                pytest.fail(f"attempt {attempt} did not reach {threshold} committed batches in time")
            run_id = run_id or _running_run(settings)
            if run_id is not None:
                detail = show_run(settings, run_id)
                if detail.attempts == attempt and detail.batches_committed >= threshold:
                    break
            time.sleep(0.01)
        time.sleep(delay)
        _kill_driver(child)
    finally:
        if child.poll() is None:
            _kill_driver(child)
        log.close()
    assert run_id is not None
    return run_id


def _kill_driver(child: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver, then at once the local Ray processes it started.

    Left alone, they fate-share with the driver only after a while, and meanwhile finish and
    commit their batches in flight: harmless, but the kill points would all drift to the end
    of the first operator. Killing them too is a crash of the whole machine.
    """
    try:
        descendants = psutil.Process(child.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    child.send_signal(signal.SIGKILL)
    for process in descendants:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    child.wait()
    psutil.wait_procs(descendants, timeout=10)


def _running_run(settings: Settings) -> str | None:
    runs = list_runs(settings)
    return runs[0].run_id if runs else None


def _run_child(command: list[str], workdir: Path) -> list[str]:
    log = workdir / "final.log"
    with log.open("wb") as handle:
        done = subprocess.run(
            [sys.executable, str(CHILD), *command],
            stdout=subprocess.PIPE,
            stderr=handle,
            timeout=ATTEMPT_TIMEOUT_S * 2,
            check=False,
        )
    assert done.returncode == 0, log.read_text(errors="replace")[-3000:]
    marked = [line for line in done.stdout.decode(errors="replace").splitlines() if line.startswith(MARK)]
    return [line.removeprefix(MARK) for line in marked]


def _keyed(table: object) -> list[tuple[object, ...]]:
    rows = table.to_pylist()  # type: ignore[attr-defined]
    return sorted(tuple(sorted(row.items())) for row in rows)


def _uncommitted_rows(before: RunDetail, reference: RunDetail) -> int:
    """Rows each operator had still to answer when the last attempt began (totals from the clean run)."""
    done = {operator.operator_key: operator.rows_in for operator in before.operators}
    return sum(operator.rows_in - done.get(operator.operator_key, 0) for operator in reference.operators)
