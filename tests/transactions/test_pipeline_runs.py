"""Queries through transactional runs on a local Ray: atomic Parquet output, failure, isolation, cancel, resume."""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from semray.api import Query, read_csv
from semray.demo import corpus
from semray.errors import ExecutionError
from semray.pipeline.runs.execute import Written, publish_parquet, resume
from semray.settings import Settings
from semray.transactions import (
    RunCancelledError,
    TransactionConflictError,
    cancel_run,
    list_runs,
    read_output,
    show_run,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROWS = 120


def _load_child() -> ModuleType:
    # The SIGKILL test's child builds the slow simulated serving config; loaded by path
    # because the test folders are not packages.
    path = Path(__file__).with_name("pipeline_child.py")
    spec = importlib.util.spec_from_file_location("semray_pipeline_child", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHILD = _load_child()


@pytest.fixture
def settings(ray_settings: Settings, tmp_path: Path) -> Settings:
    del ray_settings  # only starts the session's Ray
    return Settings(state_dir=tmp_path / "state", semantic_batch_size=8, semantic_actors=1, batch_size=256)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    corpus.write(folder, rows=ROWS)
    return folder


def semantic(data: Path, settings: Settings) -> Query:
    query: Query = CHILD.query(data, settings)
    return query


def staged_entries(output: Path) -> list[str]:
    staging = output.with_name(f".{output.name}.semray") / "staging"
    return sorted(entry.name for entry in staging.iterdir()) if staging.is_dir() else []


def test_write_parquet_is_a_published_run(data: Path, settings: Settings, tmp_path: Path) -> None:
    output = tmp_path / "out" / "ratings.parquet"
    high = read_csv(data / "reviews.csv", settings=settings).filter("rating >= 4").select("review_id", "rating")
    rows = high.write_parquet(output)
    (run,) = list_runs(settings)
    assert (run.status, run.output, run.attempts) == ("succeeded", str(output), 1)
    assert read_output(output).num_rows == rows > 0
    detail = show_run(settings, run.run_id)
    assert detail.published_version is not None and "Read csv" in detail.config["physical_plan"]
    assert detail.config["tiers"] == [] and detail.usage.calls == 0

    low = read_csv(data / "reviews.csv", settings=settings).filter("rating <= 2").select("review_id", "rating")
    low_rows = low.write_parquet(output)
    assert max(read_output(output).column("rating").to_pylist()) <= 2 and read_output(output).num_rows == low_rows
    assert [summary.status for summary in list_runs(settings)] == ["succeeded", "succeeded"]
    assert [entry.name for entry in output.parent.iterdir() if not entry.name.startswith(".")] == [output.name]


def test_a_failed_write_leaves_the_previous_output(data: Path, settings: Settings, tmp_path: Path) -> None:
    output = tmp_path / "out" / "result.parquet"
    fresh = tmp_path / "out" / "never.parquet"
    good = read_csv(data / "reviews.csv", settings=settings).select("review_id")
    good.write_parquet(output)
    previous = read_output(output)
    bad = read_csv(data / "reviews.csv", settings=settings).select(x="CAST(review AS INTEGER)")
    for target in (output, fresh):
        with pytest.raises(ExecutionError):
            bad.write_parquet(target)
        assert staged_entries(target) == []
    assert read_output(output).equals(previous)
    assert not os.path.lexists(fresh)
    failed = [summary for summary in list_runs(settings) if summary.status == "failed"]
    assert len(failed) == 2 and all(summary.error_count == 1 for summary in failed)


def test_concurrent_writers_to_one_output_first_committer_wins(data: Path, settings: Settings, tmp_path: Path) -> None:
    output = tmp_path / "out" / "shared.parquet"
    output.parent.mkdir()
    slow = semantic(data, settings)
    fast = read_csv(data / "reviews.csv", settings=settings).filter("rating = 3")
    outcome: dict[str, Any] = {}
    writer = threading.Thread(target=_capture, args=(outcome, "slow", lambda: _write(slow, settings, output)))
    writer.start()
    _wait_for(lambda: any(run.batches_committed for run in list_runs(settings)), "the slow run's first batch")
    _capture(outcome, "fast", lambda: _write(fast, settings, output))
    writer.join(timeout=300)
    assert not writer.is_alive()

    winners = [name for name, value in outcome.items() if isinstance(value, Written)]
    losers = [name for name, value in outcome.items() if isinstance(value, TransactionConflictError)]
    assert len(winners) == 1 and len(losers) == 1, outcome
    winner, loser = outcome[winners[0]], outcome[losers[0]]
    published = read_output(output)
    assert published.num_rows == winner.rows
    assert set(published.column_names) == set((slow if winners == ["slow"] else fast).plan.output_schema.names)
    lost = show_run(settings, loser.run_id)
    assert lost.status == "failed" and lost.errors[-1].error_type == "TransactionConflictError"
    assert staged_entries(output) == []

    # The loser resumes over the winner's version without paying for its batches again.
    again = resume(settings, loser.run_id)
    assert isinstance(again, Written) and again.attempt_usage.calls == 0
    republished = read_output(output)
    assert republished.num_rows == again.rows
    assert set(republished.column_names) == set((slow if losers == ["slow"] else fast).plan.output_schema.names)


def test_cancel_stops_between_batches_and_resume_finishes(data: Path, settings: Settings, tmp_path: Path) -> None:
    output = tmp_path / "out" / "cancelled.parquet"
    query = semantic(data, settings)
    outcome: dict[str, Any] = {}
    writer = threading.Thread(target=_capture, args=(outcome, "run", lambda: _write(query, settings, output)))
    writer.start()
    _wait_for(lambda: any(run.batches_committed for run in list_runs(settings)), "a committed batch")
    (run,) = list_runs(settings)
    assert cancel_run(settings, run.run_id) == "running"
    writer.join(timeout=300)
    assert isinstance(outcome["run"], RunCancelledError), outcome
    stopped = show_run(settings, run.run_id)
    assert stopped.status == "cancelled" and not os.path.lexists(output) and staged_entries(output) == []

    # A cancelled run is not resumed automatically, but by id; it pays only for the rest.
    finished = resume(settings, run.run_id)
    assert isinstance(finished, Written)
    done = show_run(settings, run.run_id)
    assert done.status == "succeeded" and done.attempts == 2
    total_rows = sum(operator.rows_in for operator in done.operators)
    assert finished.attempt_usage.calls <= total_rows - stopped.rows_committed
    assert read_output(output).num_rows == finished.rows


def _write(query: Query, settings: Settings, output: Path) -> Written:
    return publish_parquet(query.plan, settings, output, CHILD.serving(query_data(query)))


def query_data(query: Query) -> Path:
    from semray.operators import Scan, walk

    (scan,) = [node for node in walk(query.plan) if isinstance(node, Scan)]
    assert scan.source.path is not None
    return Path(scan.source.path).parent


def _capture(outcome: dict[str, Any], name: str, call: Callable[[], Any]) -> None:
    try:
        outcome[name] = call()
    except Exception as error:
        outcome[name] = error


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)
