"""Journal records: one frozen pydantic model per kind of event, written as one JSON line each.

Payloads the transaction layer does not interpret (the physical plan, configuration,
estimates, calibration) are stored as plain JSON values.
"""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

FinalStatus = Literal["succeeded", "failed", "cancelled"]
OutputKind = Literal["file", "folder"]


def utc_now() -> datetime:
    return datetime.now(UTC)


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LLMUsage(Frozen):
    """What a batch paid for model calls, e.g. ``LLMUsage(calls=8, tokens_in=900, tokens_out=16, dollars=0.0004)``."""

    calls: int = Field(default=0, ge=0)
    tokens_in: int = Field(default=0, ge=0)
    tokens_out: int = Field(default=0, ge=0)
    dollars: float = Field(default=0.0, ge=0.0)

    def __add__(self, other: LLMUsage) -> LLMUsage:
        return LLMUsage(
            calls=self.calls + other.calls,
            tokens_in=self.tokens_in + other.tokens_in,
            tokens_out=self.tokens_out + other.tokens_out,
            dollars=self.dollars + other.dollars,
        )


class OutputTarget(Frozen):
    """Where a run publishes: one parquet file or a folder of parquet files.

    >>> OutputTarget.from_path("out/reviews.parquet").kind
    'file'
    """

    path: str
    kind: OutputKind

    @classmethod
    def from_path(cls, path: str | Path, kind: OutputKind | None = None) -> OutputTarget:
        """Absolute target; the kind is ``file`` for a ``.parquet`` name, else ``folder``, unless given."""
        resolved = Path(path).expanduser().absolute()
        chosen: OutputKind = kind or ("file" if resolved.suffix == ".parquet" else "folder")
        return cls(path=str(resolved), kind=chosen)


class Record(Frozen):
    at: datetime = Field(default_factory=utc_now)
    attempt: int = Field(default=1, ge=1)


class RunStarted(Record):
    """First record of every run: what is executed, how, and where it goes."""

    kind: Literal["run_started"] = "run_started"
    run_id: str
    plan: Any
    plan_fingerprint: str
    config: dict[str, Any] = Field(default_factory=dict)
    output: OutputTarget | None
    """None for a run whose results go back to the caller instead of to a path."""
    base_version: str | None
    """Output version when the run began; publish fails with a conflict if it changed."""
    pid: int = Field(default_factory=os.getpid)
    host: str = Field(default_factory=socket.gethostname)


class RunResumed(Record):
    """A new attempt of an unfinished run; it re-reads the output version it will publish over."""

    kind: Literal["run_resumed"] = "run_resumed"
    base_version: str | None
    pid: int = Field(default_factory=os.getpid)
    host: str = Field(default_factory=socket.gethostname)


class EstimatesRecorded(Record):
    kind: Literal["estimates"] = "estimates"
    payload: Any
    expected_rows: int | None = None
    expected_dollars: float | None = None


class CalibrationRecorded(Record):
    """Labels and thresholds learned for one operator (cascade calibration), kept for resume."""

    kind: Literal["calibration"] = "calibration"
    operator_key: str
    payload: Any


class RowFailures(Frozen):
    """Rows of a batch that got no answer, for one reason, e.g.
    ``RowFailures(reason="no_label", row_ids=("r7",), example="no_label: ...")``.

    ``reason`` is the per-row error code (``semray.serving.contract.ErrorCode``); ``example`` the
    whole error text of the first such row.
    """

    reason: str
    row_ids: tuple[str, ...]
    example: str = ""


class BatchCommitted(Record):
    """One batch of one operator is done: its output is stored and will not be paid for again.

    ``row_ids`` are the rows answered (stored in ``file``, or ``inline``); ``failed`` the rows of
    the batch that got no answer, by reason. Failed rows are not stored: a resume asks them again.
    """

    kind: Literal["batch_committed"] = "batch_committed"
    operator_key: str
    batch_key: str
    row_ids: tuple[str, ...]
    rows_out: int = Field(ge=0)
    file: str = ""
    """Stored output table (parquet), relative to the run folder; empty when the table is ``inline``."""
    inline: str | None = None
    """The output table itself (an Arrow IPC stream, base64) for a small table: the record is then
    the whole commit, one fsync (``semray.transactions.batches.INLINE_BYTES``)."""
    usage: LLMUsage = Field(default_factory=LLMUsage)
    failed: tuple[RowFailures, ...] = ()
    origin: str | None = None
    """The store object holding this commit (``commits/<name>``): one a worker away from the driver's
    node committed, merged into the journal by the driver (``semray.transactions.remote_commits``),
    or, with a state URI, the copy a ledger on the driver's node stored after appending this record.
    None without a store."""

    @model_validator(mode="after")
    def _stored_somewhere(self) -> BatchCommitted:
        if not self.file and self.inline is None:
            raise ValueError("a committed batch names its table's file or holds the table inline")
        return self


class BatchRefused(Record):
    """A batch a worker of an older attempt paid for but could not commit: a newer attempt had
    begun (the run's fence refused it). Its ``usage`` was paid and bought nothing; the current
    attempt computes the batch again. ``attempt`` is the refused writer's.
    """

    kind: Literal["batch_refused"] = "batch_refused"
    operator_key: str
    batch_key: str
    rows: int = Field(ge=0)
    """Rows of the batch (answered and failed)."""
    usage: LLMUsage = Field(default_factory=LLMUsage)
    current_attempt: int = Field(ge=1)
    origin: str | None = None
    """As ``BatchCommitted.origin``: the store object a fenced-off worker away from the driver wrote."""


def refusal(record: BatchCommitted, current_attempt: int) -> BatchRefused:
    """The ``batch_refused`` record of a commit the fence turned away (``current_attempt`` is newer)."""
    rows = len(record.row_ids) + sum(len(group.row_ids) for group in record.failed)
    return BatchRefused(
        attempt=record.attempt,
        operator_key=record.operator_key,
        batch_key=record.batch_key,
        rows=rows,
        usage=record.usage,
        current_attempt=current_attempt,
        origin=record.origin,
    )


class ErrorRecorded(Record):
    kind: Literal["error"] = "error"
    error_type: str
    message: str
    operator_key: str | None = None
    batch_key: str | None = None


class PublishStarted(Record):
    """Intent: about to make ``version`` the output. Lets a crash right after the rename be recognized."""

    kind: Literal["publish_started"] = "publish_started"
    version: str


class Published(Record):
    kind: Literal["published"] = "published"
    version: str


class RunFinished(Record):
    kind: Literal["run_finished"] = "run_finished"
    status: FinalStatus
    message: str | None = None


JournalRecord = Annotated[
    RunStarted
    | RunResumed
    | EstimatesRecorded
    | CalibrationRecorded
    | BatchCommitted
    | BatchRefused
    | ErrorRecorded
    | PublishStarted
    | Published
    | RunFinished,
    Field(discriminator="kind"),
]

RECORD_ADAPTER: TypeAdapter[JournalRecord] = TypeAdapter(JournalRecord)


def encode_record(record: Record) -> bytes:
    """One JSON line, newline-terminated."""
    return record.model_dump_json().encode() + b"\n"
