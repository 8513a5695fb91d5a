"""A run's life: begin, journal, cancel, interrupt, resume, list and show."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from semray.settings import Settings
from semray.transactions import (
    LLMUsage,
    Run,
    RunCancelledError,
    RunInUseError,
    RunNotFoundError,
    RunStateError,
    batch_key,
    begin_run,
    cancel_run,
    find_resumable,
    fingerprint,
    is_cancelled,
    list_runs,
    open_run,
    resume_run,
    show_run,
)
from semray.transactions.journal import JOURNAL_NAME
from semray.transactions.records import OutputTarget

PLAN = {"op": "sem_filter", "prompt": "is {review} positive?"}


def rows_table(*row_ids: str) -> pa.Table:
    return pa.table({"_rowid": list(row_ids), "keep": [True] * len(row_ids)})


def commit(run: Run, *row_ids: str, calls: int = 1) -> None:
    key = batch_key("op1", row_ids)
    run.commit_batch("op1", key, row_ids, rows_table(*row_ids), LLMUsage(calls=calls, dollars=0.25 * calls))


def test_a_live_run_is_running_and_a_closed_one_interrupted(settings: Settings, out_dir: Path) -> None:
    run = begin_run(settings, PLAN, out_dir / "r.parquet", config={"batch_size": 2})
    commit(run, "a", "b", calls=2)
    (summary,) = list_runs(settings)
    assert (summary.run_id, summary.status, summary.batches_committed, summary.rows_committed) == (
        run.run_id,
        "running",
        1,
        2,
    )
    assert summary.usage.dollars == 0.5
    run.close()  # the driver went away without a final status
    assert list_runs(settings)[0].status == "interrupted"
    detail = show_run(settings, run.run_id)
    assert detail.plan == PLAN and detail.config == {"batch_size": 2}
    assert detail.plan_fingerprint == fingerprint(PLAN)


def test_show_reports_progress_cost_estimates_and_errors(settings: Settings) -> None:
    with begin_run(settings, PLAN, None) as run:
        run.record_estimates({"selectivity": [0.2, 0.4]}, expected_rows=10, expected_dollars=2.0)
        run.record_calibration("op1", {"threshold": 0.8, "labels": 40})
        commit(run, "a", "b", calls=2)
        commit(run, "c")
        run.record_error(TimeoutError("endpoint slow"), operator_key="op1")
    detail = show_run(settings, run.run_id)
    assert detail.status == "succeeded" and detail.ended_at is not None
    assert (detail.batches_committed, detail.rows_committed, detail.expected_rows) == (2, 3, 10)
    assert detail.usage == LLMUsage(calls=3, dollars=0.75)
    assert detail.expected_dollars == 2.0 and detail.estimates == {"selectivity": [0.2, 0.4]}
    assert detail.calibration == {"op1": {"threshold": 0.8, "labels": 40}}
    assert [(error.error_type, error.operator_key) for error in detail.errors] == [("TimeoutError", "op1")]
    assert detail.operators[0].batches == 2


def test_unknown_runs_are_named_errors(settings: Settings) -> None:
    with pytest.raises(RunNotFoundError, match="semray runs ls"):
        show_run(settings, "20261130-000000-000000")
    with pytest.raises(RunNotFoundError):
        cancel_run(settings, "../../etc")
    assert list_runs(settings) == []


def test_runs_are_listed_newest_first_and_damaged_ones_skipped(settings: Settings) -> None:
    ids = []
    for _ in range(3):
        with begin_run(settings, PLAN, None) as run:
            ids.append(run.run_id)
    damaged = settings.state_path / "runs" / ids[1] / JOURNAL_NAME
    damaged.write_bytes(b'{"kind": "run_finished", "status": "failed"}\n')
    assert [summary.run_id for summary in list_runs(settings)] == sorted([ids[0], ids[2]], reverse=True)


def test_finishing_as_succeeded_requires_a_publish(settings: Settings, out_dir: Path) -> None:
    run = begin_run(settings, PLAN, out_dir / "r.parquet")
    with pytest.raises(RunStateError, match="publish"):
        run.finish("succeeded")
    run.finish("failed")
    with pytest.raises(RunStateError, match="finished"):
        commit(run, "a")


def test_cancel_a_live_run_between_batches(settings: Settings, out_dir: Path) -> None:
    with begin_run(settings, PLAN, out_dir / "r.parquet") as run:
        commit(run, "a")
        assert cancel_run(settings, run.run_id) == "running"
        assert is_cancelled(settings, run.run_id) and run.is_cancelled()
        with pytest.raises(RunCancelledError):
            run.raise_if_cancelled()
    assert show_run(settings, run.run_id).status == "cancelled"
    assert cancel_run(settings, run.run_id) == "cancelled"


def test_cancel_a_run_with_no_driver_marks_it_at_once(settings: Settings, out_dir: Path) -> None:
    run = begin_run(settings, PLAN, out_dir / "r.parquet")
    run.close()
    assert cancel_run(settings, run.run_id) == "cancelled"
    assert show_run(settings, run.run_id).status == "cancelled"
    assert find_resumable(settings, fingerprint(PLAN), OutputTarget.from_path(out_dir / "r.parquet")) is None


def test_resume_skips_committed_batches(settings: Settings, out_dir: Path) -> None:
    run = begin_run(settings, PLAN, out_dir / "r.parquet")
    commit(run, "a", "b")
    run.close()
    with resume_run(settings, run.run_id) as again:
        assert again.attempt == 2 and again.plan == PLAN
        assert again.lookup("op1", batch_key("op1", ["b", "a"])) is not None
        assert again.lookup("op1", batch_key("op1", ["c"])) is None
        commit(again, "c")
        again.publish(rows_table("a", "b", "c"))
    detail = show_run(settings, run.run_id)
    assert (detail.status, detail.attempts, detail.batches_committed) == ("succeeded", 2, 2)
    with pytest.raises(RunStateError, match="already succeeded"):
        resume_run(settings, run.run_id)


def test_a_live_run_cannot_be_resumed_elsewhere(settings: Settings, out_dir: Path) -> None:
    with begin_run(settings, PLAN, out_dir / "r.parquet") as run:
        with pytest.raises(RunInUseError):
            resume_run(settings, run.run_id)
        run.publish(rows_table("a"))


def test_resuming_a_cancelled_run_clears_the_cancel(settings: Settings) -> None:
    run = begin_run(settings, PLAN, None)
    run.close()
    cancel_run(settings, run.run_id)
    with resume_run(settings, run.run_id) as again:
        assert not again.is_cancelled()
    assert show_run(settings, run.run_id).status == "succeeded"


def test_open_run_resumes_the_same_plan_to_the_same_output(settings: Settings, out_dir: Path) -> None:
    first = open_run(settings, PLAN, out_dir / "r.parquet")
    commit(first, "a")
    first.close()
    other_output = open_run(settings, PLAN, out_dir / "other.parquet")
    assert other_output.run_id != first.run_id
    other_output.finish("failed")
    other_plan = open_run(settings, {"op": "different"}, out_dir / "r.parquet")
    assert other_plan.run_id != first.run_id
    other_plan.close()
    with open_run(settings, PLAN, out_dir / "r.parquet") as again:
        assert (again.run_id, again.attempt) == (first.run_id, 2)
        # While it is live, the same plan to the same output starts a separate run.
        separate = open_run(settings, PLAN, out_dir / "r.parquet")
        assert separate.run_id != first.run_id
        separate.finish("failed")
        again.publish(rows_table("a"))
    fresh = open_run(settings, PLAN, out_dir / "r.parquet", resume=False)
    assert fresh.run_id not in (first.run_id, other_plan.run_id)
    fresh.finish("failed")


def test_a_publish_that_landed_before_a_crash_counts_as_success(settings: Settings, out_dir: Path) -> None:
    run = begin_run(settings, PLAN, out_dir / "r.parquet")
    run.publish(rows_table("a"))
    run.close()
    # Simulate a kill right after the rename: drop the journal's ``published`` record.
    journal = run.path / JOURNAL_NAME
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[:-1]))
    assert list_runs(settings)[0].status == "succeeded"
    assert find_resumable(settings, run.started.plan_fingerprint, run.output) is None
    with pytest.raises(RunStateError, match="published"):
        resume_run(settings, run.run_id)
    detail = show_run(settings, run.run_id)
    assert detail.status == "succeeded" and detail.published_version is not None


def test_resume_discards_what_killed_attempts_staged(settings: Settings, out_dir: Path) -> None:
    run = begin_run(settings, PLAN, out_dir / "r")
    (run.staging_path() / "part-0.parquet").write_bytes(b"half written")
    run.close()
    with resume_run(settings, run.run_id) as again:
        staging = out_dir / ".r.semray" / "staging"
        assert sorted(path.name for path in staging.iterdir()) == [], "attempt 1's files are gone"
        again.publish(rows_table("a"))
