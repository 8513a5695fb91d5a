"""Progress, journal tailing and budgets without Ray: journals written by the transaction layer
itself (``begin_run`` + ``BatchLedger.commit``, as the actors do), read by ``JournalTail``."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

from semray.operators import SourceSpec
from semray.pipeline.runs.budget import BudgetError, Forecast, budget_stop, check_forecast, in_flight_batches
from semray.pipeline.runs.progress import (
    JournalTail,
    LogReporter,
    ProgressClock,
    RunProgress,
    RunWatcher,
    format_seconds,
)
from semray.pipeline.runs.resume_record import CancellableLedger
from semray.pipeline.stages.relational import ReadStage
from semray.pipeline.stages.semantic import SemanticStage, SemanticTask
from semray.settings import Settings
from semray.transactions import LLMUsage, RowFailures, Run, RunCancelledError, begin_run, resume_run, show_run

OPERATOR = "op1"


def _run(tmp_path: Path, labels: dict[str, str] | None = None) -> tuple[Settings, Run]:
    settings = Settings(state_dir=tmp_path)
    config = {"operator_labels": labels if labels is not None else {OPERATOR: "SemFilter 'x'"}}
    return settings, begin_run(settings, {"plan": 1}, None, config=config)


def _commit(
    ledger: CancellableLedger, operator: str, ids: list[str], dollars: float, failed: tuple[str, ...] = ()
) -> None:
    table = pa.table({"_rowid": pa.array(ids, pa.string())})
    usage = LLMUsage(calls=len(ids), tokens_in=10 * len(ids), tokens_out=len(ids), dollars=dollars)
    groups = (RowFailures(reason="no_label", row_ids=failed),) if failed else ()
    ledger.commit(operator, f"{operator}:{ids[0]}", ids, table, usage, failed=groups)


def test_the_tail_reads_only_new_lines_and_counts_the_plans_operators(tmp_path: Path) -> None:
    _, run = _run(tmp_path)
    run.record_estimates({}, expected_rows=10, expected_dollars=0.1)
    ledger = CancellableLedger(run.path, run.attempt)
    tail = JournalTail(run.path)
    _commit(ledger, OPERATOR, ["a", "b"], 0.02, failed=("c",))
    first = tail.poll()
    assert (first.rows_done, first.rows_expected, first.dollars_expected) == (3, 10, 0.1)
    assert (first.usage.calls, first.paid_batches, first.fraction) == (2, 1, 0.3)
    _commit(ledger, OPERATOR + ":small", ["d"], 0.01)  # a cascade's small tier: paid, not the plan's rows
    _commit(ledger, OPERATOR, ["a", "b"], 0.02)  # the same batch again (a retried actor): paid twice, counted once
    second = tail.poll()
    assert second.rows_done == 3
    assert second.usage.calls == 5 and second.usage.dollars == pytest.approx(0.05)
    assert second.usage == show_run(Settings(state_dir=tmp_path), run.run_id).usage  # as `runs show` sums it
    run.finish("succeeded")
    assert tail.poll().finished and not tail.driver_alive()


def test_the_tail_follows_a_resume(tmp_path: Path) -> None:
    settings, run = _run(tmp_path)
    _commit(CancellableLedger(run.path, run.attempt), OPERATOR, ["a"], 0.01)
    run.finish("cancelled", "stopped: cost")
    tail = JournalTail(run.path)
    assert tail.poll().status == "cancelled"
    resumed = resume_run(settings, run.run_id)
    progress = tail.poll()
    assert (progress.status, progress.attempt, progress.message, progress.rows_done) == ("running", 2, None, 1)
    assert tail.driver_alive()
    resumed.close()


def test_progress_line_and_eta_arithmetic() -> None:
    progress = RunProgress("r1", rows_done=250, rows_expected=1000, usage=LLMUsage(calls=250, dollars=0.025))
    assert progress.line(eta_s=3725) == "r1: 250/1000 rows (25%), 250 calls, tokens 0/0, $0.0250, ETA 1h02m"
    assert RunProgress("r1", rows_done=2000, rows_expected=1000).fraction == 1.0
    assert RunProgress("r1", rows_done=5).fraction is None
    assert [format_seconds(s) for s in (0, 59.6, 61, 3600)] == ["0s", "1m00s", "1m01s", "1h00m"]
    now = [100.0]
    clock = ProgressClock(now=lambda: now[0])
    assert clock.eta_s(RunProgress("r", rows_done=200, rows_expected=1000)) is None
    now[0] = 104.0
    assert clock.eta_s(RunProgress("r", rows_done=200, rows_expected=1000)) is None  # no rows since: no rate
    now[0] = 110.0
    assert clock.eta_s(RunProgress("r", rows_done=400, rows_expected=1000)) == pytest.approx(30.0)


def test_log_reporter_logs_at_most_every_interval(capsys: pytest.CaptureFixture[str]) -> None:
    now = [0.0]
    reporter = LogReporter(10.0, now=lambda: now[0])
    for moment in (0.0, 3.0, 9.9, 10.0, 15.0, 21.0):
        now[0] = moment
        reporter.update(RunProgress("r1", rows_done=int(moment)), None)
    assert capsys.readouterr().err.count("run_progress") == 3  # at 0, 10 and 21
    LogReporter(0.0).update(RunProgress("r1"), None)
    assert "run_progress" not in capsys.readouterr().err


def test_the_budget_projects_the_batches_in_flight() -> None:
    assert budget_stop(spent=0.004, paid_batches=4, in_flight=4, budget=0.01, run_id="r") is None  # 0.008 <= 0.01
    message = budget_stop(spent=0.007, paid_batches=7, in_flight=4, budget=0.01, run_id="r", expected=0.03)
    assert message is not None
    assert message.startswith("stopped: cost $0.0070 reached the budget $0.0100 (projected $0.0110")
    assert message.endswith("resume with `semray runs resume r --max-cost 0.03`")
    assert budget_stop(spent=0.02, paid_batches=0, in_flight=0, budget=0.01, run_id="r") is not None


def test_a_forecast_over_the_budget_is_refused_with_what_to_do() -> None:
    expected = Forecast(rows=1000, dollars=0.5, dollars_low=0.25, dollars_high=float("inf"))
    check_forecast(expected, budget=None)
    check_forecast(expected, budget=0.5)
    check_forecast(None, budget=0.01)  # nothing to check before the run; the watcher still enforces it
    with pytest.raises(
        BudgetError,
        match=r"\$0\.5000 \(interval \$0\.2500-unbounded\) is over the budget \$0\.1000; "
        r"raise it with --max-cost 0\.50",
    ):
        check_forecast(expected, budget=0.1)
    # A resume: paid so far plus the estimate of the rows left.
    check_forecast(expected, budget=0.3, paid=0.2, done_share=0.8)  # 0.2 + 0.1
    with pytest.raises(BudgetError, match=r"run r1 paid \$0\.2000 so far and the rest is estimated at \$0\.2500"):
        check_forecast(expected, budget=0.3, paid=0.2, done_share=0.5, run_id="r1")


def test_in_flight_batches_count_every_actor_pool() -> None:
    task = SemanticTask(kind="filter", instruction="{t} is x", tier="large")
    read = ReadStage(source=SourceSpec(kind="csv", path="t.csv"), columns=None, batch_rows=32)
    inner = SemanticStage(task=task, operator_key="a", batch_rows=32, actors=2, inputs=(read,))
    outer = SemanticStage(task=task, operator_key="b", batch_rows=32, actors=3, inputs=(inner,))
    assert in_flight_batches(outer) == 10


def test_the_watcher_stops_a_run_over_budget_between_batches(tmp_path: Path) -> None:
    _, run = _run(tmp_path)
    ledger = CancellableLedger(run.path, run.attempt)
    _commit(ledger, OPERATOR, ["a", "b"], 0.006)
    seen: list[RunProgress] = []

    class Keep:
        def update(self, progress: RunProgress, eta_s: float | None) -> None:
            seen.append(progress)

        def close(self, progress: RunProgress) -> None:
            seen.append(progress)

    with RunWatcher(run.path, Keep(), budget=0.01, in_flight=1, stop=run.request_stop, poll_s=0.01) as watcher:
        _commit(ledger, OPERATOR, ["c"], 0.004)  # 0.01 spent: the budget is reached
        for _ in range(500):
            if watcher.stop_reason is not None:
                break
            time.sleep(0.01)
    assert watcher.stop_reason is not None and watcher.stop_reason.startswith("stopped: cost $0.0100")
    assert seen[-1].usage.dollars == pytest.approx(0.01)
    # The actors' next batch stops, saying why; so does the driver.
    with pytest.raises(RunCancelledError, match=f"run {run.run_id} stopped: cost \\$0.0100 reached the budget"):
        ledger.lookup_rows(OPERATOR, ["d"])
    with pytest.raises(RunCancelledError, match="stopped: cost") as stopped:
        run.raise_if_cancelled()
    run.finish("cancelled", str(stopped.value))
    detail = show_run(Settings(state_dir=tmp_path), run.run_id)
    assert detail.status == "cancelled" and "resume with `semray runs resume" in (detail.final_message or "")


def test_a_plain_cancel_still_says_cancelled(tmp_path: Path) -> None:
    from semray.transactions import cancel_run

    settings, run = _run(tmp_path)
    assert cancel_run(settings, run.run_id) == "running"
    with pytest.raises(RunCancelledError, match=f"^run {run.run_id} was cancelled$"):
        CancellableLedger(run.path, run.attempt).lookup_rows(OPERATOR, ["a"])
    run.close()


def test_a_budget_counts_what_workers_on_other_nodes_stored_before_the_next_push(tmp_path: Path) -> None:
    # A run copied to a store (state_uri) whose mirror would push, and so merge, only hourly: the
    # worker on another node commits to the store, which the driver's journal lacks until a merge.
    uri = (tmp_path / "bucket").as_uri()
    settings = Settings(state_dir=tmp_path / "state", state_uri=uri, state_sync_s=3600.0)
    run = begin_run(settings, {"plan": 1}, None, config={"operator_labels": {OPERATOR: "SemFilter 'x'"}})

    class AwayActor(CancellableLedger):
        def node(self) -> str | None:
            return "worker-node"

    worker = AwayActor(tmp_path / "worker" / run.run_id, run.attempt, store_uri=uri, home="driver-node")
    assert worker.away

    class Quiet:
        def update(self, progress: RunProgress, eta_s: float | None) -> None: ...

        def close(self, progress: RunProgress) -> None: ...

    budget, price = 0.025, 0.01
    watcher = RunWatcher(
        run.path, Quiet(), budget=budget, in_flight=1, stop=run.request_stop, merge=run.merge_commits, poll_s=3600.0
    )
    paid = 0.0
    with pytest.raises(RunCancelledError, match="reached the budget"):
        for index in range(10):
            worker.lookup_rows(OPERATOR, [f"r{index}"])  # each batch starts here: a stop raises
            _commit(worker, OPERATOR, [f"r{index}"], price)
            paid += price
            watcher.poll()  # what the driver's watcher thread does every half second
    # Stopped once the cost so far and one batch in flight would pass $0.025: after two batches,
    # the third refused at its start, on the worker's node, through the store's CANCEL object.
    assert watcher.stop_reason is not None and watcher.stop_reason.startswith("stopped: cost $0.0200")
    assert paid == pytest.approx(0.02)
    run.finish("cancelled", watcher.stop_reason)
    assert show_run(settings, run.run_id).usage.dollars == pytest.approx(0.02)
