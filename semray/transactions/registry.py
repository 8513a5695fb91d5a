"""The run registry under ``<state_dir>/runs/``: listing, inspecting, cancelling and finding runs to resume.

These are the plain functions behind ``semray runs ls|show|cancel`` and automatic resume. With
``Settings.state_uri`` they also read the runs copied to an object store (``remote.py``): a run
with a local folder is read there (it holds what the store holds, and maybe more), any other from
the store, its status from its lease. Where both hold a run, the longer journal wins: the local
one when this machine wrote last (maybe past the last copy), the store's when another resumed it.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from semray.log import get_logger
from semray.settings import Settings
from semray.transactions.durability import acquire_lock, is_locked, release_lock, write_bytes_atomically
from semray.transactions.errors import RunCancelledError, RunInUseError, RunNotFoundError, TransactionError
from semray.transactions.journal import JOURNAL_NAME, JournalWriter, read_journal
from semray.transactions.keys import is_run_id
from semray.transactions.publish import current_version
from semray.transactions.records import ErrorRecorded, Frozen, LLMUsage, OutputTarget, RunFinished
from semray.transactions.remote import RunMirror, StateStore, open_store, pull_run
from semray.transactions.remote_commits import pending_commits, store_fence
from semray.transactions.state import OperatorProgress, RunState, fold_records

log = get_logger(__name__)

RunStatus = Literal["running", "interrupted", "succeeded", "failed", "cancelled"]
"""``interrupted``: no final status and no live driver (killed or crashed); it can be resumed."""

DRIVER_LOCK = "driver.lock"
CANCEL_MARKER = "CANCEL"


class RunSummary(Frozen):
    """One line of ``semray runs ls``."""

    run_id: str
    status: RunStatus
    attempts: int
    output: str | None
    plan_fingerprint: str
    started_at: datetime
    ended_at: datetime | None
    last_activity_at: datetime
    batches_committed: int
    rows_committed: int
    expected_rows: int | None
    usage: LLMUsage
    """What the committed batches paid so far, over all attempts (cost so far is ``usage.dollars``,
    plus ``refused_usage`` if a resume fenced off workers that were still paying)."""
    error_count: int
    rows_failed: int = 0
    """Rows of semantic operators that got no answer (per operator in ``RunDetail.operators``)."""
    batches_refused: int = 0
    """Batches that workers of older attempts paid for after a resume began and could not commit."""
    refused_usage: LLMUsage = LLMUsage()
    """What those batches paid: spent, bought nothing, not in ``usage`` (paid in all: the sum)."""


class RunDetail(RunSummary):
    """What ``semray runs show ID`` prints."""

    plan: Any
    config: dict[str, Any]
    operators: tuple[OperatorProgress, ...]
    errors: tuple[ErrorRecorded, ...]
    estimates: Any
    expected_dollars: float | None
    calibration: dict[str, Any]
    published_version: str | None
    cancel_requested: bool
    final_message: str | None
    skipped_journal_lines: int


def runs_dir(settings: Settings) -> Path:
    return settings.state_path / "runs"


def run_dir(settings: Settings, run_id: str) -> Path:
    """The folder of an existing run; ``RunNotFoundError`` otherwise."""
    path = runs_dir(settings) / run_id
    if not is_run_id(run_id) or not (path / JOURNAL_NAME).is_file():
        raise RunNotFoundError(run_id, str(runs_dir(settings)))
    return path


def state_store(settings: Settings) -> StateStore | None:
    """The object store runs are copied to (``Settings.state_uri``, at ``state_endpoint``), None without one."""
    uri = settings.state_store_uri
    return open_store(uri) if uri else None


def load_state(path: Path) -> RunState:
    read = read_journal(path / JOURNAL_NAME)
    return fold_records(read.records, skipped_lines=len(read.skipped))


def effective_status(path: Path, state: RunState) -> RunStatus:
    """The journal's status, refined: an unfinished run with no live driver is ``interrupted``,
    unless its publish landed before the driver died, which makes it ``succeeded``."""
    if state.status != "running":
        return state.status
    if is_locked(path / DRIVER_LOCK):
        return "running"
    if publish_landed(state):
        return "succeeded"
    return "interrupted"


def publish_landed(state: RunState) -> bool:
    """True when the version this run began publishing is the one now visible."""
    output = state.output
    return state.pending_publish is not None and output is not None and current_version(output) == state.pending_publish


def list_runs(settings: Settings) -> list[RunSummary]:
    """Every run, newest first; a run folder that cannot be read is logged and left out."""
    root = runs_dir(settings)
    local = sorted(root.iterdir(), reverse=True) if root.is_dir() else []
    summaries: list[RunSummary] = []
    for path in local:
        if not is_run_id(path.name) or not (path / JOURNAL_NAME).is_file():
            continue
        try:
            state = load_state(path)
        except TransactionError as error:
            log.warning("run_unreadable", run_id=path.name, error=str(error))
            continue
        summaries.append(_summary(state, effective_status(path, state)))
    store = state_store(settings)
    if store is not None:
        local_ids = {summary.run_id for summary in summaries}
        for run_id in store.run_ids():
            if run_id in local_ids and not _store_is_ahead(store, runs_dir(settings) / run_id):
                continue
            try:
                state = remote_state(store, run_id)
            except TransactionError as error:
                log.warning("run_unreadable", run_id=run_id, uri=store.uri, error=str(error))
                continue
            summaries = [summary for summary in summaries if summary.run_id != run_id]
            summaries.append(_summary(state, remote_status(store, state)))
        summaries.sort(key=lambda summary: summary.run_id, reverse=True)
    return summaries


def _store_is_ahead(store: StateStore, path: Path) -> bool:
    """True when the store holds more of the run in ``path`` than the local journal does."""
    try:
        local = (path / JOURNAL_NAME).stat().st_size
    except FileNotFoundError:
        return True
    return sum(segment.size for segment in store.segments(path.name)) > local


def remote_state(store: StateStore, run_id: str) -> RunState:
    """A run's state as the object store holds it: its journal, and the commits workers on other
    nodes than its driver's stored that the driver has not merged yet (``remote_commits``)."""
    records, skipped = store.records(run_id)
    current = max([store_fence(store, run_id) or 1, *(record.attempt for record in records)])
    pending = pending_commits(store, run_id, records, current)
    return fold_records((*records, *pending), skipped_lines=skipped)


def store_holding(settings: Settings, run_id: str) -> StateStore | None:
    """The object store to read ``run_id`` from: it holds more of the run than this machine's folder."""
    store = state_store(settings)
    if store is None or not is_run_id(run_id) or not _store_is_ahead(store, runs_dir(settings) / run_id):
        return None
    return store if store.segments(run_id) else None


def remote_status(store: StateStore, state: RunState) -> RunStatus:
    """``effective_status`` for a run read from the store: its lease stands for the driver lock."""
    if state.status != "running":
        return state.status
    lease = store.lease(state.run_id)
    if lease is not None and lease.live:
        return "running"
    return "succeeded" if publish_landed(state) else "interrupted"


def fetch_run(settings: Settings, run_id: str) -> Path:
    """The local folder of ``run_id``, copied from the object store first when that holds more of it."""
    store = state_store(settings)
    if store is not None and is_run_id(run_id) and store.exists(store.run_path(run_id)):
        pull_run(store, runs_dir(settings), run_id)
    return run_dir(settings, run_id)


def push_run(settings: Settings, path: Path, attempt: int) -> None:
    """Copy what a driverless change (a cancel, a recovered publish) appended to ``path`` to the store."""
    store = state_store(settings)
    if store is not None:
        RunMirror.attach(store, path, attempt, settings.state_sync_s).close()


def show_run(settings: Settings, run_id: str) -> RunDetail:
    store = state_store(settings)
    local = runs_dir(settings) / run_id
    if store is not None and is_run_id(run_id) and _store_is_ahead(store, local):
        if not store.segments(run_id):
            raise RunNotFoundError(run_id, f"{runs_dir(settings)} or {store.uri}")
        state = remote_state(store, run_id)
        return _detail(state, remote_status(store, state), store.cancel_requested(run_id) is not None)
    path = run_dir(settings, run_id)
    state = load_state(path)
    return _detail(state, effective_status(path, state), (path / CANCEL_MARKER).exists())


def _detail(state: RunState, status: RunStatus, cancel_requested: bool) -> RunDetail:
    summary = _summary(state, status)
    estimates = state.estimates
    return RunDetail(
        **summary.model_dump(),
        plan=state.started.plan,
        config=state.started.config,
        operators=tuple(state.operators.values()),
        errors=state.errors,
        estimates=estimates.payload if estimates else None,
        expected_dollars=estimates.expected_dollars if estimates else None,
        calibration=dict(state.calibration),
        published_version=state.published_version,
        cancel_requested=cancel_requested,
        final_message=state.final_message,
        skipped_journal_lines=state.skipped_lines,
    )


def find_resumable(settings: Settings, plan_fingerprint: str, output: OutputTarget | None) -> str | None:
    """The latest interrupted or failed run of the same plan to the same output, if any.

    Cancelled runs are left alone (someone stopped them on purpose); resume those by id.
    """
    for summary in list_runs(settings):
        if summary.plan_fingerprint != plan_fingerprint or summary.status not in ("interrupted", "failed"):
            continue
        local = runs_dir(settings) / summary.run_id
        store = state_store(settings)
        from_store = store is not None and _store_is_ahead(store, local)
        state = remote_state(store, summary.run_id) if store and from_store else load_state(local)
        if state.output == output:
            return summary.run_id
    return None


def is_cancelled(settings: Settings, run_id: str) -> bool:
    """True once ``cancel_run`` was asked for this run; the pipeline polls it between batches."""
    return (runs_dir(settings) / run_id / CANCEL_MARKER).exists()


CANCEL_REQUESTED = "cancel requested"


def request_stop(path: Path, reason: str) -> None:
    """Ask the run in ``path`` to stop between batches, saying why (``stop_reason`` reads it).

    What ``cancel_run`` does for a live driver, with a reason of the caller's (a budget reached:
    ``semray.pipeline.runs.progress``); the run finishes as cancelled with ``reason`` as its message.
    """
    write_bytes_atomically(path / CANCEL_MARKER, reason.encode("utf-8") + b"\n")
    log.info("run_stop_requested", run_id=path.name, reason=reason)


def stop_reason(path: Path) -> str | None:
    """Why the run in ``path`` was asked to stop: None when it was not, else the marker's text
    (``"cancel requested"`` for ``semray runs cancel``)."""
    try:
        text = (path / CANCEL_MARKER).read_text(encoding="utf-8", errors="replace").strip()
    except FileNotFoundError:
        return None
    return text or CANCEL_REQUESTED


def stopped_error(path: Path) -> RunCancelledError:
    """The error a run asked to stop raises between batches: its reason when one was given."""
    return cancelled_error(path.name, stop_reason(path))


def cancelled_error(run_id: str, reason: str | None) -> RunCancelledError:
    """``stopped_error`` for a stop whose reason was read elsewhere (the store's ``CANCEL`` object)."""
    if not reason or reason == CANCEL_REQUESTED:
        return RunCancelledError(f"run {run_id} was cancelled")
    return RunCancelledError(f"run {run_id} {reason}")


def cancel_run(settings: Settings, run_id: str) -> RunStatus:
    """Ask a run to stop. A live driver sees the marker between batches and finishes as cancelled;
    a run with no live driver is marked cancelled at once. Returns the status after the request.

    With a state URI, a run whose lease is live elsewhere gets the stop through the store (its
    writer polls it each ``state_sync_s``); one with no live writer is copied here, cancelled, copied back.
    """
    store = state_store(settings)
    if store is not None and is_run_id(run_id) and store.exists(store.run_path(run_id)):
        lease = store.lease(run_id)
        if lease is not None and lease.live and not is_locked(runs_dir(settings) / run_id / DRIVER_LOCK):
            state = remote_state(store, run_id)
            if state.status != "running":
                return state.status
            store.request_remote_stop(run_id, CANCEL_REQUESTED)
            log.info("run_cancel_requested", run_id=run_id, uri=store.uri)
            return "running"
    # A run this machine's driver holds is read here: fetching it would refuse its own live lease.
    held = is_locked(runs_dir(settings) / run_id / DRIVER_LOCK)
    path = fetch_run(settings, run_id) if store is not None and not held else run_dir(settings, run_id)
    state = load_state(path)
    status = effective_status(path, state)
    if status in ("succeeded", "failed", "cancelled"):
        return status
    write_bytes_atomically(path / CANCEL_MARKER, CANCEL_REQUESTED.encode("utf-8") + b"\n")
    try:
        fd = acquire_lock(path / DRIVER_LOCK, f"run {run_id}", wait_s=0.0)
    except RunInUseError:
        log.info("run_cancel_requested", run_id=run_id)
        return "running"
    try:
        writer = JournalWriter(path / JOURNAL_NAME)
        writer.append(RunFinished(attempt=state.attempts, status="cancelled", message="cancelled while not running"))
        writer.close()
        push_run(settings, path, state.attempts)
    finally:
        release_lock(fd)
    log.info("run_cancelled", run_id=run_id)
    return "cancelled"


def _summary(state: RunState, status: RunStatus) -> RunSummary:
    output = state.output
    return RunSummary(
        run_id=state.run_id,
        status=status,
        attempts=state.attempts,
        output=output.path if output else None,
        plan_fingerprint=state.started.plan_fingerprint,
        started_at=state.started.at,
        ended_at=state.ended_at,
        last_activity_at=state.last_record_at,
        batches_committed=state.batches_committed,
        rows_committed=state.rows_committed,
        expected_rows=state.estimates.expected_rows if state.estimates else None,
        usage=state.usage,
        error_count=len(state.errors),
        rows_failed=state.rows_failed,
        batches_refused=len(state.refused),
        refused_usage=state.refused_usage,
    )
