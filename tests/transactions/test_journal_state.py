"""Run state folded from journal records: status, progress, cost so far, errors."""

from __future__ import annotations

import pytest

from semray.transactions.errors import TransactionError
from semray.transactions.records import (
    BatchCommitted,
    CalibrationRecorded,
    ErrorRecorded,
    EstimatesRecorded,
    LLMUsage,
    Published,
    PublishStarted,
    RunFinished,
    RunResumed,
    RunStarted,
)
from semray.transactions.state import fold_records

STARTED = RunStarted(run_id="20261130-101500-abcdef", plan={}, plan_fingerprint="f", output=None, base_version="v0")


def committed(key: str, rows: tuple[str, ...], calls: int, operator: str = "op1") -> BatchCommitted:
    usage = LLMUsage(calls=calls, tokens_in=10 * calls, tokens_out=calls, dollars=0.5 * calls)
    return BatchCommitted(operator_key=operator, batch_key=key, row_ids=rows, rows_out=1, file="f", usage=usage)


def test_unfinished_run_is_running_with_progress_and_cost() -> None:
    state = fold_records([STARTED, committed("a", ("1", "2"), 2), committed("b", ("3",), 1, operator="op2")])
    assert state.status == "running"
    assert (state.batches_committed, state.rows_committed) == (2, 3)
    assert state.usage == LLMUsage(calls=3, tokens_in=30, tokens_out=3, dollars=1.5)
    assert set(state.operators) == {"op1", "op2"}


def test_a_batch_committed_twice_counts_once_but_both_were_paid() -> None:
    state = fold_records([STARTED, committed("a", ("1", "2"), 2), committed("a", ("1", "2"), 2)])
    assert state.batches_committed == 1 and state.rows_committed == 2
    assert state.usage.calls == 4
    assert state.operators["op1"].batches == 1


def test_final_status_and_resume_reopen_the_run() -> None:
    failed = [STARTED, ErrorRecorded(error_type="E", message="boom"), RunFinished(status="failed", message="boom")]
    state = fold_records(failed)
    assert (state.status, state.final_message, len(state.errors)) == ("failed", "boom", 1)
    assert state.ended_at is not None
    resumed = fold_records([*failed, RunResumed(attempt=2, base_version="v1")])
    assert (resumed.status, resumed.attempts, resumed.base_version, resumed.ended_at) == ("running", 2, "v1", None)
    assert len(resumed.errors) == 1, "errors of earlier attempts stay in the history"


def test_publish_intent_is_pending_until_published() -> None:
    pending = fold_records([STARTED, PublishStarted(version="v1")])
    assert (pending.pending_publish, pending.published_version) == ("v1", None)
    done = fold_records([STARTED, PublishStarted(version="v1"), Published(version="v1")])
    assert (done.pending_publish, done.published_version) == (None, "v1")


def test_estimates_and_calibration_keep_the_latest() -> None:
    state = fold_records(
        [
            STARTED,
            EstimatesRecorded(payload={"rows": 10}, expected_rows=10),
            EstimatesRecorded(payload={"rows": 12}, expected_rows=12),
            CalibrationRecorded(operator_key="op1", payload={"threshold": 0.7}),
        ]
    )
    assert state.estimates is not None and state.estimates.expected_rows == 12
    assert state.calibration == {"op1": {"threshold": 0.7}}


def test_a_journal_without_its_first_record_is_reported() -> None:
    with pytest.raises(TransactionError, match="run_started"):
        fold_records([RunFinished(status="failed")])
    with pytest.raises(TransactionError, match="two run_started"):
        fold_records([STARTED, STARTED])
