"""Transactional runs: an append-only journal per run, durable batch commits, atomic publish,
resume without paying twice, and optimistic isolation of concurrent runs to one output.

See docs/transactions.md for the guarantees and the on-disk format.
"""

from __future__ import annotations

from semray.transactions.batches import BatchLedger, RowLookup, committed_table
from semray.transactions.errors import (
    FencedWriterError,
    OutputTargetError,
    RunCancelledError,
    RunInUseError,
    RunNotFoundError,
    RunStateError,
    TransactionConflictError,
    TransactionError,
)
from semray.transactions.journal import JournalRead, JournalWriter, read_journal
from semray.transactions.keys import batch_key, fingerprint, new_run_id
from semray.transactions.publish import current_version, read_output
from semray.transactions.records import LLMUsage, OutputTarget, RowFailures
from semray.transactions.registry import (
    RunDetail,
    RunStatus,
    RunSummary,
    cancel_run,
    find_resumable,
    is_cancelled,
    list_runs,
    show_run,
)
from semray.transactions.run import Run, begin_run, open_run, resume_run
from semray.transactions.state import FailureCount, OperatorProgress, RunState

__all__ = [
    "BatchLedger",
    "FailureCount",
    "FencedWriterError",
    "JournalRead",
    "JournalWriter",
    "LLMUsage",
    "OperatorProgress",
    "OutputTarget",
    "OutputTargetError",
    "RowFailures",
    "RowLookup",
    "Run",
    "RunCancelledError",
    "RunDetail",
    "RunInUseError",
    "RunNotFoundError",
    "RunState",
    "RunStateError",
    "RunStatus",
    "RunSummary",
    "TransactionConflictError",
    "TransactionError",
    "batch_key",
    "begin_run",
    "cancel_run",
    "committed_table",
    "current_version",
    "find_resumable",
    "fingerprint",
    "is_cancelled",
    "list_runs",
    "new_run_id",
    "open_run",
    "read_journal",
    "read_output",
    "resume_run",
    "show_run",
]
