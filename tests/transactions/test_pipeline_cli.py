"""``semray runs ls|show|cancel`` over runs made with the transactions library (no Ray, no model)."""

from __future__ import annotations

import argparse
import json

import pyarrow as pa
import pytest

from semray.cli_runs import add_runs_commands
from semray.settings import Settings
from semray.transactions import LLMUsage, RunNotFoundError, batch_key, begin_run, show_run

PLAN = {"version": 1, "plan": {"op": "scan"}}
PHYSICAL = "Semantic[filter on large] '{review} is positive' (actor pool of 1, batches of 8)\n  Read csv:/data/r.csv"


def runs(settings: Settings, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="semray")
    add_runs_commands(parser.add_subparsers(required=True))
    args = parser.parse_args(["runs", *argv])
    return int(args.command(args, settings))


def interrupted_run(settings: Settings) -> str:
    run = begin_run(settings, PLAN, None, config={"physical_plan": PHYSICAL})
    rows = ["r1", "r2"]
    usage = LLMUsage(calls=2, tokens_in=120, tokens_out=2, dollars=0.0025)
    run.ledger.commit("op-filter", batch_key("op-filter", rows), rows, pa.table({"_rowid": rows}), usage)
    run.record_error("row r3 could not be answered: empty answer", "op-filter")
    run.close()  # as if the driver died: interrupted
    return run.run_id


def test_ls_shows_status_progress_cost_and_errors(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert runs(settings, "ls") == 0
    assert "no runs" in capsys.readouterr().out
    first = interrupted_run(settings)
    done = begin_run(settings, {"version": 1, "plan": {"op": "other"}}, None)
    done.finish("succeeded")
    assert runs(settings, "ls") == 0
    out = capsys.readouterr().out
    out = out[out.index("┏") :]  # after any log lines of the runs made above
    assert first in out and done.run_id in out and "(2 runs)" in out
    line = next(line for line in out.splitlines() if line.startswith(f"│ {first}"))
    assert "interrupted" in line and "1 batches, 2 rows" in line and "0.0025" in line
    assert runs(settings, "ls", "--limit", "1") == 0
    assert "1 older runs" in capsys.readouterr().out
    assert runs(settings, "ls", "--format", "json") == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # Run ids sort by start second, then at random: both runs began in the same second.
    by_id = {record["run_id"]: record for record in records}
    assert set(by_id) == {done.run_id, first}
    assert by_id[first]["usage"]["calls"] == 2 and by_id[first]["error_count"] == 1


def test_show_prints_operators_errors_and_the_physical_plan(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = interrupted_run(settings)
    assert runs(settings, "show", run_id) == 0
    out = capsys.readouterr().out
    for text in ("interrupted", "op-filter", "2 calls, 120/2 tokens in/out, 0.0025 dollars", "row r3 could not"):
        assert text in out
    assert "physical plan" in out and "Read csv:/data/r.csv" in out
    assert runs(settings, "show", run_id, "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["operators"][0]["rows_in"] == 2


def test_cancel_marks_a_stopped_run_and_leaves_finished_ones(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = interrupted_run(settings)
    assert runs(settings, "cancel", run_id) == 0
    assert f"run {run_id} cancelled" in capsys.readouterr().out
    assert show_run(settings, run_id).status == "cancelled"
    assert runs(settings, "cancel", run_id) == 0
    assert "already cancelled" in capsys.readouterr().out


def test_cancel_of_a_live_run_is_a_request(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    live = begin_run(settings, PLAN, None)
    assert runs(settings, "cancel", live.run_id) == 0
    assert "cancel requested" in capsys.readouterr().out
    assert live.is_cancelled() and show_run(settings, live.run_id).cancel_requested
    live.close()


def test_unknown_runs_are_named_errors(settings: Settings) -> None:
    for action in ("show", "resume", "cancel"):
        with pytest.raises(RunNotFoundError, match="semray runs ls"):
            runs(settings, action, "20261130-000000-abcdef")
