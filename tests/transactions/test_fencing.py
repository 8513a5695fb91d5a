"""Fencing without Ray: once a resume begins, writers of older attempts can neither commit nor pay.

Two writers on one run's ledger (the killed driver's actor, attempt 1, and the resumed
attempt 2), in one process and across processes; the paid-but-refused batch is journaled
and reported; the model is not called by a fenced writer (semantic UDF and set-level asker).
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Sequence
from multiprocessing.synchronize import Event
from pathlib import Path

import pyarrow as pa
import pytest

from semray.cli_runs import render_detail
from semray.pipeline.stages.semantic import SemanticTask
from semray.pipeline.workers.journaled_questions import JournaledAsker
from semray.pipeline.workers.semantic_batches import SemanticBatchUDF
from semray.serving.contract import ModelRequest, ModelResponse, Usage
from semray.settings import Settings
from semray.transactions import (
    BatchLedger,
    FencedWriterError,
    LLMUsage,
    Run,
    batch_key,
    begin_run,
    read_journal,
    resume_run,
    show_run,
)
from semray.transactions.fence import FENCE_NAME, advance_fence, current_attempt
from semray.transactions.journal import JOURNAL_NAME
from semray.transactions.records import BatchCommitted, RunResumed

OPERATOR = "op"


def table(*row_ids: str) -> pa.Table:
    return pa.table({"_rowid": list(row_ids), "score": list(range(len(row_ids)))})


def commit(ledger: BatchLedger, *row_ids: str, calls: int = 1) -> BatchCommitted:
    return ledger.commit(OPERATOR, batch_key(OPERATOR, row_ids), row_ids, table(*row_ids), LLMUsage(calls=calls))


def killed_then_resumed(settings: Settings) -> tuple[Run, BatchLedger, Run]:
    """Attempt 1 commits a batch, its driver dies (its actor's ledger lives on), attempt 2 begins."""
    first = begin_run(settings, plan={"test": "fence"}, output=None)
    # What an actor of attempt 1 holds (pickled); it files its tables (no inline records), so the
    # test sees a refused table removed.
    orphan = BatchLedger(first.path, first.attempt, inline_bytes=0)
    commit(orphan, "r1", "r2")
    first.close()  # the driver is gone: no final status, its lock released
    return first, orphan, resume_run(settings, first.run_id)


def journal_order_is_fenced(run_dir: Path) -> None:
    """No batch of an attempt is committed after a newer attempt began, in journal order."""
    newest = 1
    for record in read_journal(run_dir / JOURNAL_NAME).records:
        if isinstance(record, RunResumed):
            newest = record.attempt
        if isinstance(record, BatchCommitted):
            assert record.attempt == newest, f"attempt {record.attempt} committed after attempt {newest} began"


def test_a_resume_fences_off_the_older_attempts_writer(settings: Settings) -> None:
    first, orphan, resumed = killed_then_resumed(settings)
    assert (resumed.attempt, current_attempt(resumed.path)) == (2, 2)

    with pytest.raises(FencedWriterError) as refused:
        commit(orphan, "r3", "r4", calls=2)
    error = refused.value
    assert (error.run_id, error.attempt, error.current_attempt) == (first.run_id, 1, 2)
    assert first.run_id in str(error) and "attempt 1" in str(error) and "attempt 2" in str(error)
    assert pickle.loads(pickle.dumps(error)).current_attempt == 2  # crosses from a Ray actor
    with pytest.raises(FencedWriterError):
        orphan.raise_if_fenced()  # checked before each batch's model call

    commit(resumed.ledger, "r3", "r4")
    commit(resumed.ledger, "r5")
    with pytest.raises(FencedWriterError):  # stays fenced: no retry of the commit gets through
        commit(orphan, "r6")
    resumed.finish("succeeded")

    state = resumed.state()
    rows = [row for record in state.committed.values() for row in record.row_ids]
    assert sorted(rows) == ["r1", "r2", "r3", "r4", "r5"]  # none lost, none twice
    assert {key: record.attempt for (_, key), record in state.committed.items()} == {
        batch_key(OPERATOR, ["r1", "r2"]): 1,
        batch_key(OPERATOR, ["r3", "r4"]): 2,
        batch_key(OPERATOR, ["r5"]): 2,
    }
    journal_order_is_fenced(resumed.path)
    stored = sorted(path.name for path in (resumed.path / "batches").rglob("*.parquet"))
    # Attempt 1's first table only (the refused ones removed); attempt 2's travel in their records.
    assert len(stored) == 1 and "-a1-" in stored[0]

    # Paid, not committed: journaled under the old attempt, reported apart from the cost.
    refused = [(record.attempt, record.current_attempt, record.rows, record.usage.calls) for record in state.refused]
    assert refused == [(1, 2, 2, 2), (1, 2, 1, 1)]
    assert state.usage.calls == 3  # committed batches only
    detail = show_run(settings, first.run_id)
    assert (detail.batches_refused, detail.refused_usage.calls) == (2, 3)
    assert "paid, not committed" in render_detail(detail)


def test_a_fence_ahead_of_the_journal_is_reused_by_the_next_resume(settings: Settings) -> None:
    # A resume killed between moving the fence and journaling run_resumed: the fence says 2,
    # the journal still 1. Attempt 1's writers are fenced already; the next resume is attempt 2.
    run = begin_run(settings, plan={"test": "fence"}, output=None)
    orphan = BatchLedger(run.path, run.attempt)
    run.close()
    advance_fence(run.path, 2)
    with pytest.raises(FencedWriterError):
        commit(orphan, "r1")
    resumed = resume_run(settings, run.run_id)
    assert resumed.attempt == 2 and (run.path / FENCE_NAME).read_text() == "2\n"
    commit(resumed.ledger, "r1")
    resumed.close()


def test_a_run_never_resumed_has_no_fence(settings: Settings) -> None:
    run = begin_run(settings, plan={"test": "fence"}, output=None)
    assert current_attempt(run.path) is None
    commit(run.ledger, "r1")
    run.ledger.raise_if_fenced()
    run.finish("succeeded")


def _commit_until_fenced(ledger: BatchLedger, started: Event, results: multiprocessing.Queue[tuple[int, str]]) -> None:
    committed = 0
    try:
        while True:
            commit(ledger, f"w{committed:05d}")
            committed += 1
            if committed == 3:
                started.set()
    except FencedWriterError as error:
        results.put((committed, type(error).__name__))


def test_a_writer_in_another_process_stops_at_the_resume(settings: Settings) -> None:
    # The orphan commits as fast as it can in its own process while the resume begins: the
    # journal lock orders them, so none of its commits lands after the new attempt's record.
    run = begin_run(settings, plan={"test": "fence"}, output=None)
    context = multiprocessing.get_context("fork")
    started, results = context.Event(), context.Queue()
    orphan = context.Process(target=_commit_until_fenced, args=(BatchLedger(run.path, 1), started, results))
    orphan.start()
    try:
        assert started.wait(timeout=60)
        run.close()
        resumed = resume_run(settings, run.run_id)
        committed, error = results.get(timeout=60)
    finally:
        orphan.join(timeout=60)
    assert error == "FencedWriterError" and committed >= 3
    journal_order_is_fenced(run.path)
    state = resumed.state()
    assert len(state.committed) == committed and len(state.refused) == 1
    resumed.close()


class CountingTiers:
    """Stands in for ``TierHandles``: answers Yes, counts the requests it was sent."""

    def __init__(self) -> None:
        self.requests = 0

    def generate(self, tier: str, requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        self.requests += len(requests)
        usage = Usage(input_tokens=3, output_tokens=1)
        return [
            ModelResponse(text="Yes", value="Yes", confidence=0.9, usage=usage, request_id=r.request_id)
            for r in requests
        ]


def test_fenced_workers_do_not_call_the_model(settings: Settings) -> None:
    _, orphan, resumed = killed_then_resumed(settings)
    tiers = CountingTiers()
    task = SemanticTask(kind="filter", instruction="{text} is urgent", tier="large")
    batch = pa.table({"_rowid": ["r7", "r8"], "text": ["a", "b"]})
    with pytest.raises(FencedWriterError):
        SemanticBatchUDF(task, OPERATOR, tiers, orphan)(batch)  # type: ignore[arg-type]
    asker = JournaledAsker(tiers, "large", orphan, "set-op")  # type: ignore[arg-type]
    with pytest.raises(FencedWriterError):
        asker.ask([ModelRequest(prompt="is a > b?", request_id="a>b")])
    assert tiers.requests == 0
    # The current attempt's worker is not fenced.
    assert SemanticBatchUDF(task, OPERATOR, tiers, resumed.ledger)(batch).num_rows == 2  # type: ignore[arg-type]
    assert tiers.requests == 2
    resumed.close()
