"""A run's progress and cost while it runs, read from its journal.

The semantic actors journal every committed batch (``transactions/batches.py``); the driver, or
``semray runs watch ID`` in another shell, tails that journal (``JournalTail``: only the new,
complete lines at each poll) instead of asking the actors. ``RunProgress`` is what one poll
knows: rows done of the cost model's estimate, model calls, tokens, dollars of the estimate;
``ProgressClock`` turns successive polls into a rate and an ETA.

In the driver a ``RunWatcher`` thread polls every half second while the pipeline runs: it sets
the run's gauges on the Ray dashboard (``semray.cluster.metrics.record_run``), counts the
batches its attempt committed per operator (``semray.pipeline.workers.metering.CommitMeter``), hands each poll to
a ``ProgressReporter`` (the CLI's progress bar on a terminal, else ``LogReporter``: a
``run_progress`` line every ``Settings.progress_interval_s``) and, with a budget, asks the run to
stop once its projected cost would pass it (``semray.pipeline.runs.budget``).

>>> RunProgress(run_id="r1", rows_done=500, rows_expected=2000,
...     usage=LLMUsage(calls=500, dollars=0.05), dollars_expected=0.2).line(eta_s=90)
'r1: 500/2000 rows (25%), 500 calls, tokens 0/0, $0.0500 of ~$0.2000, ETA 1m30s'
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from semray.cluster import metrics
from semray.log import get_logger
from semray.pipeline.runs.budget import budget_stop
from semray.pipeline.workers.metering import CommitMeter
from semray.transactions import LLMUsage, TransactionError, read_journal
from semray.transactions.durability import is_locked
from semray.transactions.journal import JOURNAL_NAME
from semray.transactions.records import (
    BatchCommitted,
    EstimatesRecorded,
    Record,
    RunFinished,
    RunResumed,
    RunStarted,
)
from semray.transactions.registry import DRIVER_LOCK
from semray.transactions.remote import StateStore
from semray.transactions.remote_commits import SegmentReader

log = get_logger(__name__)

POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class RunProgress:
    """A run as one poll of its journal finds it (all attempts)."""

    run_id: str
    status: str = "running"
    """The journal's: running, succeeded, failed or cancelled."""
    attempt: int = 1
    rows_done: int = 0
    """Rows the plan's model-calling operators committed, answered or failed."""
    rows_expected: int | None = None
    usage: LLMUsage = field(default_factory=LLMUsage)
    paid_batches: int = 0
    """Committed batches that paid for at least one call (their mean projects the next ones)."""
    dollars_expected: float | None = None
    message: str | None = None
    """The final status's message (why a run failed or stopped)."""

    @property
    def finished(self) -> bool:
        return self.status != "running"

    @property
    def fraction(self) -> float | None:
        """Rows done of the estimate, at most 1 (None without an estimate)."""
        if not self.rows_expected:
            return None
        return min(1.0, self.rows_done / self.rows_expected)

    def line(self, eta_s: float | None = None) -> str:
        """One line for a log or a terminal, e.g. ``r1: 500/2000 rows (25%), 500 calls, ...``."""
        rows = f"{self.rows_done} rows"
        if self.rows_expected:
            rows = f"{self.rows_done}/{self.rows_expected} rows ({self.fraction:.0%})"
        dollars = f"${self.usage.dollars:.4f}"
        if self.dollars_expected is not None:
            dollars += f" of ~${self.dollars_expected:.4f}"
        text = (
            f"{self.run_id}: {rows}, {self.usage.calls} calls, tokens {self.usage.tokens_in}/{self.usage.tokens_out}, "
            f"{dollars}"
        )
        if eta_s is not None:
            text += f", ETA {format_seconds(eta_s)}"
        if self.finished:
            text += f", {self.status}" + (f": {self.message}" if self.message else "")
        return text


def format_seconds(seconds: float) -> str:
    """``format_seconds(90)`` is ``'1m30s'``; ``format_seconds(4000)`` is ``'1h06m'``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class JournalTail:
    """Follows one run's journal: each ``poll`` reads only what was appended since the last.

    Rows count for the plan's model-calling operators (the ``operator_labels`` the driver
    journals with the run; every operator key without a ``:`` suffix for a run without them), a
    batch committed twice once; usage counts every committed batch, as ``semray runs show`` does.
    """

    def __init__(self, run_dir: Path, on_record: Callable[[Record], None] | None = None) -> None:
        """``on_record`` sees every new record, in journal order (the driver's ``CommitMeter``)."""
        self.run_dir = run_dir
        self.on_record = on_record
        self._offset = 0
        self._operators: frozenset[str] | None = None
        self._seen: set[tuple[str, str]] = set()
        self._progress = RunProgress(run_id=run_dir.name)

    @property
    def progress(self) -> RunProgress:
        return self._progress

    def poll(self) -> RunProgress:
        progress = self._progress
        for record in self._new_records():
            progress = self._fold(progress, record)
            if self.on_record is not None:
                self.on_record(record)
        self._progress = progress
        return progress

    def driver_alive(self) -> bool:
        """True while a driver holds the run (a running run without one was killed: interrupted)."""
        return is_locked(self.run_dir / DRIVER_LOCK)

    def _new_records(self) -> tuple[Record, ...]:
        read = read_journal(self.run_dir / JOURNAL_NAME, offset=self._offset, include_unterminated=False)
        self._offset = read.end_offset
        return read.records

    def _fold(self, progress: RunProgress, record: Any) -> RunProgress:
        match record:
            case RunStarted():
                labels = record.config.get("operator_labels")
                self._operators = frozenset(labels) if isinstance(labels, dict) and labels else None
                return replace(progress, run_id=record.run_id)
            case RunResumed():
                return replace(progress, status="running", attempt=max(progress.attempt, record.attempt), message=None)
            case EstimatesRecorded():
                rows = record.expected_rows if record.expected_rows is not None else progress.rows_expected
                dollars = record.expected_dollars if record.expected_dollars is not None else progress.dollars_expected
                return replace(progress, rows_expected=rows, dollars_expected=dollars)
            case BatchCommitted():
                return self._batch(progress, record)
            case RunFinished():
                return replace(progress, status=record.status, message=record.message)
        return progress

    def _batch(self, progress: RunProgress, record: BatchCommitted) -> RunProgress:
        paid = progress.paid_batches + (1 if record.usage.calls else 0)
        usage = progress.usage + record.usage
        key = (record.operator_key, record.batch_key)
        counted = self._counts(record.operator_key) and key not in self._seen
        self._seen.add(key)
        rows = len(record.row_ids) + sum(len(group.row_ids) for group in record.failed) if counted else 0
        return replace(progress, usage=usage, paid_batches=paid, rows_done=progress.rows_done + rows)

    def _counts(self, operator_key: str) -> bool:
        if self._operators is None:
            return ":" not in operator_key
        return operator_key in self._operators


class StoreTail(JournalTail):
    """``JournalTail`` over a run copied to an object store (``Settings.state_uri``), for ``semray runs
    watch`` on another machine than the driver's: the segments its driver pushed (every
    ``state_sync_s``), so it lags the run by up to that; the driver is alive while its lease is.

    >>> StoreTail(open_store("s3://bucket/semray"), "20261130-101500-3fa2c1").poll()  # doctest: +SKIP
    """

    def __init__(self, store: StateStore, run_id: str) -> None:
        super().__init__(Path(run_id))
        self.store = store
        self._segments = SegmentReader(store, run_id)

    def driver_alive(self) -> bool:
        lease = self.store.lease(self.run_dir.name)
        return lease is not None and lease.live

    def _new_records(self) -> tuple[Record, ...]:
        return self._segments.new_records()


class ProgressClock:
    """Rate and ETA from successive polls: rows done since the first poll over the seconds since.

    >>> clock = ProgressClock(now=lambda: 0.0)
    >>> clock.eta_s(RunProgress("r", rows_done=100, rows_expected=1000))  # the first poll: no rate yet
    >>> clock.now = lambda: 10.0
    >>> clock.eta_s(RunProgress("r", rows_done=300, rows_expected=1000))
    35.0
    """

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self.now = now
        self._first: tuple[float, int] | None = None

    def eta_s(self, progress: RunProgress) -> float | None:
        """Seconds left at the rate so far; None before any rate or without an estimate."""
        moment = self.now()
        if self._first is None:
            self._first = (moment, progress.rows_done)
            return None
        started, rows = self._first
        elapsed, done = moment - started, progress.rows_done - rows
        if not progress.rows_expected or elapsed <= 0 or done <= 0:
            return None
        return max(0.0, progress.rows_expected - progress.rows_done) * elapsed / done


class ProgressReporter(Protocol):
    """Shows a run's progress: ``update`` at every poll, ``close`` once with the last one."""

    def update(self, progress: RunProgress, eta_s: float | None) -> None: ...

    def close(self, progress: RunProgress) -> None: ...


class LogReporter:
    """A ``run_progress`` structlog line at most every ``interval_s`` seconds (0: none), at
    ``level`` (the CLI logs at warning so that the line shows under its default log level)."""

    def __init__(self, interval_s: float, level: str = "info", now: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.level = level
        self.now = now
        self._last: float | None = None

    def update(self, progress: RunProgress, eta_s: float | None) -> None:
        if self.interval_s <= 0:
            return
        moment = self.now()
        if self._last is not None and moment - self._last < self.interval_s:
            return
        self._last = moment
        getattr(log, self.level)(
            "run_progress",
            run_id=progress.run_id,
            rows_done=progress.rows_done,
            rows_expected=progress.rows_expected,
            calls=progress.usage.calls,
            tokens_in=progress.usage.tokens_in,
            tokens_out=progress.usage.tokens_out,
            dollars=round(progress.usage.dollars, 6),
            dollars_expected=progress.dollars_expected,
            eta_s=round(eta_s, 1) if eta_s is not None else None,
        )

    def close(self, progress: RunProgress) -> None:
        del progress  # query_finished (pipeline/runs/execute.py) says how it ended


class RunWatcher:
    """The driver's thread that tails its run's journal while the pipeline runs (module docstring).

    ``stop(reason)`` is how it stops the run over budget (``Run.request_stop``); ``budget`` None
    watches only. ``merge``, with a budget, is called before each poll: with a state URI it appends
    the commits workers on other nodes stored (``Run.merge_commits``), so that the budget counts them
    within a poll rather than at the mirror's next push. ``attempt`` is the driver's: only its
    batches count on the dashboard's per-operator counters. A failing poll is logged and retried at
    the next one: watching never fails a run.
    """

    def __init__(
        self,
        run_dir: Path,
        reporter: ProgressReporter,
        *,
        budget: float | None = None,
        in_flight: int = 0,
        stop: Callable[[str], None] | None = None,
        merge: Callable[[], object] | None = None,
        poll_s: float = POLL_S,
        attempt: int = 1,
    ) -> None:
        self.meter = CommitMeter(run_dir.name, attempt)
        self.tail = JournalTail(run_dir, on_record=self.meter.observe)
        self.reporter = reporter
        self.budget = budget
        self.in_flight = in_flight
        self._stop_run = stop
        self._merge = merge
        self.poll_s = poll_s
        self.clock = ProgressClock()
        self.stop_reason: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"semray-watch-{run_dir.name}", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._done.set()
        self._thread.join()
        self.reporter.close(self.poll())

    def _loop(self) -> None:
        while not self._done.wait(self.poll_s):
            self.poll()

    def poll(self) -> RunProgress:
        """Read what the journal gained, report it, and stop the run when it would pass its budget."""
        try:
            if self.budget is not None and self._merge is not None:
                self._merge()  # before the decision: commits stored by workers on other nodes count
            progress = self.tail.poll()
        except (OSError, TransactionError) as error:  # a journal briefly unreadable must not fail the run
            log.warning("run_watch_failed", run_id=self.tail.run_dir.name, error=f"{type(error).__name__}: {error}")
            return self.tail.progress
        metrics.record_run(
            progress.run_id,
            metrics.RunPoint(
                rows_done=progress.rows_done,
                rows_expected=progress.rows_expected,
                dollars=progress.usage.dollars,
                dollars_estimated=progress.dollars_expected,
                budget=self.budget,
            ),
        )
        self.reporter.update(progress, self.clock.eta_s(progress))
        self._check_budget(progress)
        return progress

    def _check_budget(self, progress: RunProgress) -> None:
        if self.budget is None or self.stop_reason is not None or progress.finished:
            return
        reason = budget_stop(
            progress.usage.dollars,
            progress.paid_batches,
            self.in_flight,
            self.budget,
            progress.run_id,
            progress.dollars_expected,
        )
        if reason is None:
            return
        self.stop_reason = reason
        log.warning("run_budget_reached", run_id=progress.run_id, dollars=progress.usage.dollars, budget=self.budget)
        if self._stop_run is not None:
            self._stop_run(reason)
