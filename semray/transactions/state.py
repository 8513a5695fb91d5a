"""Run state reconstructed from a journal: status, progress, cost so far, errors.

The journal is the only source of truth; this module folds its records, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

from semray.transactions.errors import TransactionError
from semray.transactions.records import (
    BatchCommitted,
    BatchRefused,
    CalibrationRecorded,
    ErrorRecorded,
    EstimatesRecorded,
    Frozen,
    JournalRecord,
    LLMUsage,
    OutputTarget,
    Published,
    PublishStarted,
    RunFinished,
    RunResumed,
    RunStarted,
)

JournalStatus = Literal["running", "succeeded", "failed", "cancelled"]
"""Status as the journal alone tells it; ``running`` means no final record after the last attempt began."""


class FailureCount(Frozen):
    """Failed rows of one operator for one reason (a per-row error code), with one example message."""

    reason: str
    rows: int
    example: str = ""


class OperatorProgress(Frozen):
    """Committed work of one operator: distinct batches and rows, everything paid (retries
    included), and the rows that got no answer.

    ``rows_failed`` counts distinct rows that failed in some attempt and were not answered in a
    later one (a resume asks failed rows again); ``failures`` splits them by reason, most first.
    """

    operator_key: str
    batches: int = 0
    rows_in: int = 0
    rows_out: int = 0
    usage: LLMUsage = LLMUsage()
    rows_failed: int = 0
    failures: tuple[FailureCount, ...] = ()

    @property
    def rows_attempted(self) -> int:
        """Rows answered plus rows failed."""
        return self.rows_in + self.rows_failed


@dataclass(frozen=True, slots=True)
class RunState:
    """Everything a run's journal says, e.g. ``fold_records(read_journal(path).records).status``."""

    started: RunStarted
    status: JournalStatus
    attempts: int
    base_version: str | None
    last_record_at: datetime
    ended_at: datetime | None
    final_message: str | None
    committed: Mapping[tuple[str, str], BatchCommitted]
    operators: Mapping[str, OperatorProgress]
    usage: LLMUsage
    """What the committed batches paid, over all attempts (paid, not committed: ``refused_usage``)."""
    errors: tuple[ErrorRecorded, ...]
    estimates: EstimatesRecorded | None
    calibration: Mapping[str, Any]
    pending_publish: str | None
    """Version whose publish began in the current attempt and was not journaled as done."""
    published_version: str | None
    skipped_lines: int = 0
    refused: tuple[BatchRefused, ...] = ()
    """Batches workers of older attempts paid for and could not commit (fenced off by a resume)."""

    @property
    def run_id(self) -> str:
        return self.started.run_id

    @property
    def output(self) -> OutputTarget | None:
        return self.started.output

    @property
    def batches_committed(self) -> int:
        return len(self.committed)

    @property
    def rows_committed(self) -> int:
        return sum(progress.rows_in for progress in self.operators.values())

    @property
    def rows_failed(self) -> int:
        return sum(progress.rows_failed for progress in self.operators.values())

    @property
    def refused_usage(self) -> LLMUsage:
        """Paid, not committed: what fenced-off workers of older attempts spent (not in ``usage``)."""
        return sum((record.usage for record in self.refused), LLMUsage())


def fold_records(records: Iterable[JournalRecord], skipped_lines: int = 0) -> RunState:
    """Reconstruct a run's state from its records, in journal order."""
    iterator = iter(records)
    first = next(iterator, None)
    if not isinstance(first, RunStarted):
        raise TransactionError("journal does not begin with a run_started record; the run folder is damaged")
    status: JournalStatus = "running"
    attempts, base_version = 1, first.base_version
    last_at, ended_at, final_message = first.at, None, None
    committed: dict[tuple[str, str], BatchCommitted] = {}
    operators: dict[str, OperatorProgress] = {}
    usage = LLMUsage()
    errors: list[ErrorRecorded] = []
    estimates: EstimatesRecorded | None = None
    calibration: dict[str, Any] = {}
    pending: str | None = None
    published: str | None = None
    failed: dict[str, _Failed] = {}
    refused: list[BatchRefused] = []
    for record in iterator:
        last_at = max(last_at, record.at)
        match record:
            case RunResumed():
                attempts = max(attempts, record.attempt)
                status, base_version, pending = "running", record.base_version, None
                ended_at, final_message = None, None
            case BatchCommitted():
                usage = usage + record.usage
                operators[record.operator_key] = _progress(operators.get(record.operator_key), record, committed)
                committed.setdefault((record.operator_key, record.batch_key), record)
                for group in record.failed:
                    failed.setdefault(record.operator_key, _Failed()).add(group.reason, group.row_ids, group.example)
            case BatchRefused():
                refused.append(record)
            case ErrorRecorded():
                errors.append(record)
            case EstimatesRecorded():
                estimates = record
            case CalibrationRecorded():
                calibration[record.operator_key] = record.payload
            case PublishStarted():
                pending = record.version
            case Published():
                pending, published = None, record.version
            case RunFinished():
                status, ended_at, final_message = record.status, record.at, record.message
            case RunStarted():
                raise TransactionError("journal holds two run_started records; the run folder is damaged")
    for operator_key, tally in failed.items():
        answered = {row for (key, _), record in committed.items() if key == operator_key for row in record.row_ids}
        operators[operator_key] = tally.apply(operators[operator_key], answered)
    return RunState(
        started=first,
        status=status,
        attempts=attempts,
        base_version=base_version,
        last_record_at=last_at,
        ended_at=ended_at,
        final_message=final_message,
        committed=MappingProxyType(committed),
        operators=MappingProxyType(operators),
        usage=usage,
        errors=tuple(errors),
        estimates=estimates,
        calibration=MappingProxyType(calibration),
        pending_publish=pending,
        published_version=published,
        skipped_lines=skipped_lines,
        refused=tuple(refused),
    )


def _progress(
    current: OperatorProgress | None, record: BatchCommitted, committed: Mapping[tuple[str, str], BatchCommitted]
) -> OperatorProgress:
    progress = current or OperatorProgress(operator_key=record.operator_key)
    duplicate = (record.operator_key, record.batch_key) in committed
    # A batch committed twice (a retried actor) counts once as progress, but both paid.
    return OperatorProgress(
        operator_key=record.operator_key,
        batches=progress.batches + (0 if duplicate else 1),
        rows_in=progress.rows_in + (0 if duplicate else len(record.row_ids)),
        rows_out=progress.rows_out + (0 if duplicate else record.rows_out),
        usage=progress.usage + record.usage,
    )


class _Failed:
    """Failed rows of one operator while the journal is folded: the latest reason per row."""

    def __init__(self) -> None:
        self.reasons: dict[str, str] = {}
        self.examples: dict[str, str] = {}

    def add(self, reason: str, row_ids: Iterable[str], example: str) -> None:
        for row_id in row_ids:
            self.reasons.pop(row_id, None)  # re-inserted: the latest failure of a row wins
            self.reasons[row_id] = reason
        self.examples.setdefault(reason, example)

    def apply(self, progress: OperatorProgress, answered: set[str]) -> OperatorProgress:
        """``progress`` with the rows that failed and were never answered."""
        counts: dict[str, int] = {}
        for row_id, reason in self.reasons.items():
            if row_id not in answered:
                counts[reason] = counts.get(reason, 0) + 1
        failures = tuple(
            FailureCount(reason=reason, rows=rows, example=self.examples.get(reason, ""))
            for reason, rows in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        )
        return progress.model_copy(update={"rows_failed": sum(counts.values()), "failures": failures})
