"""A run as its driver sees it: begin or resume, journal, commit batches, publish, finish.

with open_run(settings, plan=spec_json, config=cfg, output="out/result.parquet") as run:
    for operator_key, row_ids, batch in work:
        run.raise_if_cancelled()
        key = batch_key(operator_key, row_ids)
        if run.lookup(operator_key, key) is None:
            run.commit_batch(operator_key, key, row_ids, compute(batch), usage)
    run.publish(result_table)          # or write into run.staging_path() first
# leaving the block finishes the run: succeeded, failed (exception) or cancelled
"""

from __future__ import annotations

import os
import shutil
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import pyarrow as pa

from semray.log import get_logger
from semray.settings import Settings
from semray.transactions import publish as publishing
from semray.transactions.batches import BatchLedger
from semray.transactions.durability import (
    acquire_lock,
    fsync_directory,
    is_locked,
    make_directory_durably,
    release_lock,
)
from semray.transactions.errors import RunCancelledError, RunStateError
from semray.transactions.fence import advance_fence
from semray.transactions.journal import JOURNAL_NAME, JournalWriter
from semray.transactions.keys import fingerprint, new_run_id
from semray.transactions.records import (
    BatchCommitted,
    CalibrationRecorded,
    ErrorRecorded,
    EstimatesRecorded,
    FinalStatus,
    LLMUsage,
    OutputTarget,
    Published,
    PublishStarted,
    Record,
    RunFinished,
    RunResumed,
    RunStarted,
)
from semray.transactions.registry import (
    CANCEL_MARKER,
    DRIVER_LOCK,
    fetch_run,
    find_resumable,
    load_state,
    publish_landed,
    push_run,
    request_stop,
    runs_dir,
    state_store,
    stopped_error,
)
from semray.transactions.remote import RunMirror
from semray.transactions.remote_commits import CommitMerger, write_store_fence
from semray.transactions.state import RunState

log = get_logger(__name__)

ABANDONED_AFTER_S = 60.0


class Run:
    """The driver's handle on one attempt of a run; it holds the run's driver lock until finished."""

    def __init__(
        self,
        path: Path,
        started: RunStarted,
        attempt: int,
        base_version: str | None,
        lock_fd: int,
        mirror: RunMirror | None = None,
    ) -> None:
        self.path = path
        self.started = started
        self.attempt = attempt
        self.base_version = base_version
        self.ledger = BatchLedger(path, attempt, store_uri=mirror.store.uri if mirror is not None else None)
        self._journal = JournalWriter(path / JOURNAL_NAME)
        self._lock_fd: int | None = lock_fd
        self._published: str | None = None
        self._mirror = mirror
        """Copies the journal to ``Settings.state_uri`` (``remote.py``); None without one."""
        if mirror is not None:
            mirror.start()

    @property
    def run_id(self) -> str:
        return self.started.run_id

    @property
    def plan(self) -> Any:
        """The journaled physical plan: what a resumed run must execute."""
        return self.started.plan

    @property
    def config(self) -> dict[str, Any]:
        return self.started.config

    @property
    def output(self) -> OutputTarget | None:
        return self.started.output

    @property
    def finished(self) -> bool:
        return self._lock_fd is None

    def state(self) -> RunState:
        return load_state(self.path)

    def lookup(self, operator_key: str, batch_key: str) -> pa.Table | None:
        return self.ledger.lookup(operator_key, batch_key)

    def commit_batch(
        self,
        operator_key: str,
        batch_key: str,
        row_ids: Sequence[str | int],
        table: pa.Table,
        usage: LLMUsage | None = None,
    ) -> BatchCommitted:
        self._require_open()
        return self.ledger.commit(operator_key, batch_key, row_ids, table, usage)

    def record_estimates(
        self, payload: Any, expected_rows: int | None = None, expected_dollars: float | None = None
    ) -> None:
        self._append(EstimatesRecorded(payload=payload, expected_rows=expected_rows, expected_dollars=expected_dollars))

    def record_calibration(self, operator_key: str, payload: Any) -> None:
        self._append(CalibrationRecorded(operator_key=operator_key, payload=payload))

    def record_error(
        self, error: BaseException | str, operator_key: str | None = None, batch_key: str | None = None
    ) -> None:
        """Journal an error (fatal or not); the run's status is set only by ``finish``."""
        if isinstance(error, BaseException):
            error_type, message = type(error).__name__, "".join(traceback.format_exception_only(error)).strip()
        else:
            error_type, message = "error", error
        self._append(
            ErrorRecorded(error_type=error_type, message=message, operator_key=operator_key, batch_key=batch_key)
        )

    def is_cancelled(self) -> bool:
        return (self.path / CANCEL_MARKER).exists()

    def raise_if_cancelled(self) -> None:
        """Raise ``RunCancelledError`` once a stop was asked for (its message says why)."""
        if self.is_cancelled():
            raise stopped_error(self.path)

    def request_stop(self, reason: str) -> None:
        """Stop this run between batches (actors and driver), finishing it cancelled with ``reason``.

        With a state URI the stop is also put in the store at once, where workers on other nodes
        read it before each batch (else they would see it at the mirror's next interval)."""
        request_stop(self.path, reason)
        if self._mirror is not None:
            try:
                self._mirror.store.request_remote_stop(self.run_id, reason)
            except OSError as error:  # the mirror's next interval copies the local marker
                log.warning("run_remote_stop_failed", run_id=self.run_id, error=str(error))

    def merge_commits(self) -> None:
        """With a state URI: append to the journal what workers on other nodes committed to the store
        since the last merge, now rather than at the mirror's next push (``RunMirror.merge_now``)."""
        if self._mirror is not None and self._lock_fd is not None:
            self._mirror.merge_now()

    def staging_path(self) -> Path:
        """Where to write results before ``publish()``: a ``.parquet`` file path or a folder, next to the output."""
        return publishing.staging_path(self._require_output(), self.run_id, self.attempt)

    def publish(self, table: pa.Table | None = None) -> str:
        """Atomically make the staged results (or ``table``) the output; returns the new version.

        Raises ``TransactionConflictError`` when another run published to the output since this
        attempt began; then nothing of this run is visible.
        """
        self._require_open()
        target = self._require_output()
        staged = self.staging_path()
        if table is not None:
            publishing.stage_table(target, staged, table)
        version = publishing.version_name(self.run_id, self.attempt, target)
        self._append(PublishStarted(version=version))
        publishing.publish(target, staged, version, self.base_version, self.run_id)
        self._append(Published(version=version))
        self._published = version
        return version

    def finish(self, status: FinalStatus, message: str | None = None) -> None:
        """Write the final status and release the run. A run with an output succeeds only once published."""
        self._require_open()
        if status == "succeeded" and self.output is not None and self._published is None:
            raise RunStateError(f"run {self.run_id} has not published to {self.output.path}; call publish() first")
        self._append(RunFinished(status=status, message=message))
        if status != "succeeded" and self.output is not None:
            publishing.discard_staging(self.output, self.run_id, self.attempt)
        self.close()
        log.info("run_finished", run_id=self.run_id, status=status, attempt=self.attempt)

    def close(self) -> None:
        """Release the driver lock without a final status (the run stays resumable)."""
        self._journal.close()
        if self._mirror is not None and self._lock_fd is not None:
            self._mirror.close()  # before the lock goes: no other driver here takes the run mid-copy
        if self._lock_fd is not None:
            release_lock(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.finished:
            return
        if error is None:
            if self.output is None or self._published is not None:
                self.finish("succeeded")
            elif self.is_cancelled():
                self.finish("cancelled", "cancel requested")
            else:
                self.finish("failed", "the run ended without publishing its results")
        elif isinstance(error, RunCancelledError | KeyboardInterrupt):
            self.finish("cancelled", str(error) or type(error).__name__)
        else:
            self.record_error(error)
            self.finish("failed", str(error))

    def _append(self, record: Record) -> None:
        self._require_open()
        self._journal.append(record.model_copy(update={"attempt": self.attempt}))
        if self._mirror is not None:
            try:
                self._mirror.push()
            except OSError as error:  # the store is unreachable: the record is committed here, the next push copies it
                log.warning("run_mirror_push_failed", run_id=self.run_id, error=str(error))

    def _require_open(self) -> None:
        if self._lock_fd is None:
            raise RunStateError(f"run {self.run_id} attempt {self.attempt} is finished; resume it to continue")

    def _require_output(self) -> OutputTarget:
        if self.output is None:
            raise RunStateError(f"run {self.run_id} has no output path to publish to")
        return self.output


def begin_run(
    settings: Settings,
    plan: Any,
    output: str | Path | OutputTarget | None,
    config: dict[str, Any] | None = None,
    plan_fingerprint: str | None = None,
) -> Run:
    """Start a new run of ``plan`` (JSON-able physical plan) that will publish to ``output``."""
    target = _target(output)
    if target is not None:
        publishing.check_publishable(target)
    run_id = new_run_id()
    root = runs_dir(settings)
    make_directory_durably(root)
    _remove_abandoned_creations(root)
    # Built under a hidden name and renamed into place, so every visible run folder has a
    # complete run_started record (and its driver lock already held).
    building = root / f".{run_id}.creating"
    building.mkdir()
    lock_fd = acquire_lock(building / DRIVER_LOCK, f"run {run_id}")
    base_version = publishing.current_version(target) if target is not None else None
    started = RunStarted(
        run_id=run_id,
        plan=plan,
        plan_fingerprint=plan_fingerprint or fingerprint(plan),
        config=config or {},
        output=target,
        base_version=base_version,
    )
    writer = JournalWriter.create(building / JOURNAL_NAME)
    writer.append(started)
    writer.close()
    path = root / run_id
    os.rename(building, path)
    fsync_directory(root)
    log.info("run_started", run_id=run_id, output=target.path if target else None, base_version=base_version)
    return Run(path, started, 1, base_version, lock_fd, _mirror(settings, path, 1, lock_fd))


def resume_run(settings: Settings, run_id: str) -> Run:
    """A new attempt of an unfinished (interrupted, failed or cancelled) run.

    The caller re-executes ``run.plan`` and skips batches that ``run.lookup`` finds. Workers of
    older attempts still alive (actors of a killed driver) can no longer commit from here on:
    their commits raise ``FencedWriterError``. Raises ``RunInUseError`` when a live driver holds
    it, ``RunStateError`` when it succeeded.
    """
    path = fetch_run(settings, run_id)
    lock_fd = acquire_lock(path / DRIVER_LOCK, f"run {run_id}", wait_s=0.0)
    store = state_store(settings)
    try:
        state = load_state(path)
        if state.status == "running" and publish_landed(state):
            _complete_landed_publish(path, state)
            push_run(settings, path, state.attempts)
            raise RunStateError(f"run {run_id} had published its output before it stopped; nothing to resume")
        if state.status == "succeeded":
            raise RunStateError(f"run {run_id} already succeeded; nothing to resume (start a new run instead)")
        target = state.output
        base_version = publishing.current_version(target) if target is not None else None
        if target is not None:
            # Earlier attempts killed mid-staging left files no one will publish.
            publishing.discard_staging(target, run_id)
        attempt = state.attempts + 1
        marker = path / CANCEL_MARKER
        if marker.exists():
            marker.unlink()
            fsync_directory(path)
        writer = JournalWriter(path / JOURNAL_NAME)
        with writer.locked() as append:
            if store is not None:
                # What workers on other nodes stored before this point is committed, anything later
                # refused; the store's fence stops them at their next batch.
                CommitMerger(store, path).merge_locked(append)
                write_store_fence(store, run_id, attempt)
            # Fence first, under the journal's lock that every commit reads the fence under:
            # from here on no worker of an older attempt commits. A crash before the record
            # leaves the fence one ahead of the journal; the next resume reuses that number.
            advance_fence(path, attempt)
            append(RunResumed(attempt=attempt, base_version=base_version))
        writer.close()
        mirror = _mirror(settings, path, attempt, lock_fd)
    except BaseException:
        release_lock(lock_fd)
        raise
    log.info(
        "run_resumed",
        run_id=run_id,
        attempt=attempt,
        committed_batches=state.batches_committed,
        paid_dollars=state.usage.dollars,
    )
    return Run(path, state.started, attempt, base_version, lock_fd, mirror)


def open_run(
    settings: Settings,
    plan: Any,
    output: str | Path | OutputTarget | None,
    config: dict[str, Any] | None = None,
    plan_fingerprint: str | None = None,
    resume: bool = True,
) -> Run:
    """Resume the latest interrupted or failed run of the same plan to the same output, else begin one."""
    target = _target(output)
    chosen_fingerprint = plan_fingerprint or fingerprint(plan)
    if resume:
        candidate = find_resumable(settings, chosen_fingerprint, target)
        if candidate is not None:
            try:
                return resume_run(settings, candidate)
            except RunStateError as error:  # RunInUseError included: someone else is on it
                log.info("run_not_resumed", run_id=candidate, reason=str(error))
    return begin_run(settings, plan, target, config, chosen_fingerprint)


def _mirror(settings: Settings, path: Path, attempt: int, lock_fd: int) -> RunMirror | None:
    """The writer's copy to ``Settings.state_uri``, its first push done (the run is visible there)."""
    store = state_store(settings)
    if store is None:
        return None
    try:
        if attempt > 1:
            store.clear_remote_stop(path.name)
        return RunMirror.attach(store, path, attempt, settings.state_sync_s, CommitMerger(store, path).merge)
    except BaseException:
        release_lock(lock_fd)
        raise


def _complete_landed_publish(path: Path, state: RunState) -> None:
    writer = JournalWriter(path / JOURNAL_NAME)
    version = state.pending_publish or ""
    writer.append(Published(attempt=state.attempts, version=version))
    message = "its publish had completed when the driver stopped"
    writer.append(RunFinished(attempt=state.attempts, status="succeeded", message=message))
    writer.close()
    log.info("run_publish_recovered", run_id=state.run_id, version=version)


def _remove_abandoned_creations(root: Path) -> None:
    # A driver killed while creating its run leaves a hidden folder that no live process
    # locks. A creation takes milliseconds, and one just begun may not hold its lock yet,
    # so only folders a minute old count as abandoned.
    for path in root.glob(".*.creating"):
        try:
            age_s = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            continue
        if age_s > ABANDONED_AFTER_S and not is_locked(path / DRIVER_LOCK):
            shutil.rmtree(path, ignore_errors=True)


def _target(output: str | Path | OutputTarget | None) -> OutputTarget | None:
    if output is None or isinstance(output, OutputTarget):
        return output
    return OutputTarget.from_path(output)
