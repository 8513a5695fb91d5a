"""Errors of transactional runs; all are ``SemrayError`` so callers catch one family."""

from __future__ import annotations

from semray.errors import SemrayError


class TransactionError(SemrayError):
    """A run's journal, committed batches or publish step cannot do what was asked."""


class TransactionConflictError(TransactionError):
    """Another run published to the same output after this run started (optimistic commit lost).

    Nothing of this run became visible; its committed batches stay journaled, so
    ``semray runs resume ID`` republishes over the new version without paying again.
    """

    def __init__(self, output: str, base_version: str | None, current_version: str | None, run_id: str) -> None:
        super().__init__(
            f"output {output} changed while run {run_id} was executing (started from version "
            f"{base_version or 'none'}, now {current_version or 'none'}); nothing was published. "
            f"Run `semray runs resume {run_id}` to publish over the newer version (committed batches are reused)"
        )
        self.output = output
        self.base_version = base_version
        self.current_version = current_version
        self.run_id = run_id


class RunNotFoundError(TransactionError):
    """No run with this id exists under the state folder."""

    def __init__(self, run_id: str, runs_dir: str) -> None:
        super().__init__(f"run {run_id!r} not found under {runs_dir}; list runs with `semray runs ls`")
        self.run_id = run_id


class RunStateError(TransactionError):
    """The run is in a state that does not allow the request (e.g. resuming a succeeded run)."""


class RunInUseError(RunStateError):
    """Another live process is driving this run."""


class RunCancelledError(TransactionError):
    """The run was cancelled (``semray runs cancel ID``); the pipeline raises it between batches."""


class OutputTargetError(TransactionError):
    """The output path cannot be published to atomically."""


class FencedWriterError(TransactionError):
    """A worker of an older attempt of a run tried to commit or pay for a batch after a newer
    attempt (a resume) began: the run's fence refuses it, and the worker stops.

    Raised in the orphaned worker (a Ray actor of a killed driver), never in the live attempt.
    """

    def __init__(self, run_id: str, attempt: int, current_attempt: int) -> None:
        super().__init__(
            f"run {run_id}: attempt {attempt} is fenced off, attempt {current_attempt} of the run has begun "
            f"(a resume), so this worker of attempt {attempt} stops without committing; attempt "
            f"{current_attempt} computes its batches. Nothing to do, unless no resume was meant: then see "
            f"`semray runs show {run_id}`"
        )
        self.run_id = run_id
        self.attempt = attempt
        self.current_attempt = current_attempt


class StoreWriterConflictError(TransactionError):
    """Another writer added to a run's journal in the object store (``Settings.state_uri``): this
    writer stops copying; its commits stay in its local staging folder (``semray.transactions.remote``)."""


class ObjectExistsError(TransactionError):
    """A write-once object (a journal segment, a commit object, a cache segment) was put under a name
    that already holds one; the put was refused and the stored object is unchanged
    (``semray.transactions.write_once``)."""
