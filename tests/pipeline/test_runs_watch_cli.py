"""``semray runs watch ID`` following a run from "another shell" (no Ray, no model): a thread
drives the run as its driver and actors would, through the transactions library, while the
command tails its journal; the exit code is the run's end state."""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from semray.cli_runs import add_runs_commands
from semray.settings import Settings
from semray.transactions import LLMUsage, batch_key, begin_run, show_run
from semray.transactions.records import FinalStatus

PLAN = {"version": 1, "plan": {"op": "scan"}}
BATCHES = (["a", "b"], ["c", "d"])
PAUSE_S = 0.4
FINAL: dict[str, FinalStatus] = {"succeeded": "succeeded", "failed": "failed", "cancelled": "cancelled"}


def runs(settings: Settings, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="semray")
    add_runs_commands(parser.add_subparsers(required=True))
    args = parser.parse_args(["runs", *argv])
    return int(args.command(args, settings))


@pytest.mark.parametrize(
    ("end", "message", "code"),
    [
        ("succeeded", None, 0),
        ("failed", "SemFilter 'x': 4 of 4 rows got no answer", 1),
        ("cancelled", "stopped: cost $0.0040 reached the budget $0.0040", 3),
        ("interrupted", None, 4),
    ],
)
def test_watch_follows_a_run_to_its_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], end: str, message: str | None, code: int
) -> None:
    settings = Settings(state_dir=tmp_path)
    run = begin_run(settings, PLAN, None, config={"operator_labels": {"op": "SemFilter 'x'"}})
    run.record_estimates({}, expected_rows=4, expected_dollars=0.004)
    ended_at: list[float] = []

    def drive() -> None:  # the driver and its actors: two batches, a pause before each, then the end
        for rows in BATCHES:
            time.sleep(PAUSE_S)
            usage = LLMUsage(calls=2, tokens_in=20, tokens_out=2, dollars=0.002)
            run.ledger.commit("op", batch_key("op", rows), rows, pa.table({"_rowid": rows}), usage)
        ended_at.append(time.monotonic())
        if end == "interrupted":
            run.close()  # the driver died: its lock is freed with no final status
        else:
            run.finish(FINAL[end], message)

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        assert runs(settings, "watch", run.run_id, "--interval", "0.05") == code
        returned_at = time.monotonic()
    finally:
        driver.join()
    assert ended_at and returned_at >= ended_at[0]  # it followed the run until it ended
    assert show_run(settings, run.run_id).status == end
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("{")]  # not log events
    said = f"run {run.run_id} {end}" + (f": {message}" if message else "")
    progress = f"{run.run_id}: 4/4 rows (100%), 4 calls, tokens 40/4, $0.0040 of ~$0.0040"
    if end != "interrupted":
        progress += f", {end}" + (f": {message}" if message else "")
    assert lines[-2:] == [said, progress]


def test_watch_of_a_finished_run_returns_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(state_dir=tmp_path)
    run = begin_run(settings, PLAN, None)
    run.finish("succeeded")
    started = time.monotonic()
    assert runs(settings, "watch", run.run_id, "--interval", "5") == 0
    assert time.monotonic() - started < 5
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("{")]
    assert lines[-2] == f"run {run.run_id} succeeded"
