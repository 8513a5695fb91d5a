"""One exception hierarchy for semray; every message says what to do next."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


class SemrayError(Exception):
    """Base of every error semray raises on purpose.

    Every one pickles, whatever its constructor takes (Ray carries errors between processes):
    it is rebuilt from its message and attributes without calling ``__init__`` again.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_error, (type(self), self.args, dict(self.__dict__)))


def _rebuild_error(cls: type[SemrayError], args: tuple[Any, ...], state: dict[str, Any]) -> SemrayError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class PlanError(SemrayError):
    """A logical plan is invalid (unknown column, bad expression, bad argument)."""


class ColumnNotFoundError(PlanError):
    """A referenced column does not exist in the operator's input."""

    def __init__(self, column: str, available: Iterable[str], where: str) -> None:
        names = [name for name in available if name != "_rowid"]
        hint = suggest(column, names)
        message = f"column {column!r} not found in {where}"
        if hint:
            message += f"; did you mean {hint!r}?"
        else:
            message += f" (columns: {', '.join(names) or 'none'})"
        super().__init__(message)
        self.column = column


class TableNotFoundError(PlanError):
    """A query names a table that was not given."""

    def __init__(self, table: str, available: Iterable[str]) -> None:
        names = list(available)
        hint = suggest(table, names)
        message = f"table {table!r} not found"
        message += f"; did you mean {hint!r}?" if hint else f" (tables: {', '.join(names) or 'none'})"
        super().__init__(message)
        self.table = table


class ExpressionError(PlanError):
    """A SQL expression does not parse or does not type-check against its input."""


class UnsafeExpressionError(ExpressionError):
    """A plan expression is not one scalar expression over its input (a subquery, a table
    function, a setting, ...): plans may not read files or the session through SQL."""


class ExpressionLimitError(ExpressionError):
    """A plan expression passes a size limit (``operators/expression_limits.py``): its length,
    how many operators it chains, or how deeply it nests; says the limit, the size and what to do."""


class PlanFormatError(PlanError):
    """A JSON plan is malformed or of an unsupported version."""


class SourceError(SemrayError):
    """A data source is missing, unreadable or empty."""


class SegmentError(SemrayError):
    """A document segment breaks the hierarchy's invariants (a span outside its parent, ordinals out of order)."""


class LoweringError(SemrayError):
    """A logical operator has no physical implementation (yet)."""


class ExecutionError(SemrayError):
    """A pipeline failed while running."""


class FailedRowsError(ExecutionError):
    """Rows of a semantic operator got no answer: more than ``Settings.max_error_rate`` of them,
    or one under ``on_error="fail"``. ``reasons`` counts the failed rows by per-row error code."""

    def __init__(
        self,
        message: str,
        *,
        operator: str = "",
        failed: int = 0,
        attempted: int = 0,
        reasons: dict[str, int] | None = None,
    ) -> None:
        super().__init__(message)
        self.operator = operator
        self.failed = failed
        self.attempted = attempted
        self.reasons = dict(reasons or {})


class ClusterError(SemrayError):
    """Ray could not be started or reached."""


class StateDirError(SemrayError):
    """The state folder cannot hold runs where this process runs: an object-store URI, or a
    folder in a Ray job's temporary working directory."""


class JobError(ClusterError):
    """A Ray job could not be submitted, found, read or stopped."""


class CatalogError(SemrayError):
    """The catalog cannot do what was asked: an unknown or clashing dataset name, a version that
    does not exist, a data server that cannot be read, an ingest that found nothing readable."""


class SearchError(CatalogError):
    """A search is malformed (mode, k, query vector) or its filter is unsafe or refused."""


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """Return the closest candidate to ``name``, or None when nothing is close.

    >>> suggest("revew", ["review", "rating"])
    'review'
    """
    pool = list(candidates)
    lowered = {candidate.lower(): candidate for candidate in pool}
    if name.lower() in lowered:
        return lowered[name.lower()]
    matches = difflib.get_close_matches(name, pool, n=1, cutoff=0.6)
    return matches[0] if matches else None


class SandboxError(ExecutionError):
    """Model-written or user-supplied code (``SemCode``) failed in its sandbox process; ``kind``
    says how (``violation``, ``timeout``, ``memory``, ``code``, ``output``, ``crash``). The engine
    process never runs the code, so it is unaffected."""

    def __init__(self, message: str, *, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


class SandboxViolationError(SandboxError):
    """The code tried something outside the sandbox: a file, a socket, a process, a module not
    on the allow-list."""


class SandboxTimeoutError(SandboxError):
    """The code ran past its wall-clock or CPU-seconds limit and was stopped."""


class SandboxMemoryError(SandboxError):
    """The code allocated past its memory limit."""


class SandboxCodeError(SandboxError):
    """The code does not compile, defines no ``transform``, or raised."""


class SandboxOutputError(SandboxError):
    """The code returned the wrong type, columns, value types or number of rows."""


class SandboxCrashError(SandboxError):
    """The sandbox process could not start or ended unexpectedly."""


class CodeGenerationError(PlanError):
    """A ``SemCode`` operator got no validated function at plan time."""


class CodeGenerationUnavailableError(CodeGenerationError):
    """The tier asked to write code cannot (the simulated tier answers from labels)."""


class CodeValidationError(CodeGenerationError):
    """Every generated function (the first and each retry) failed validation; ``attempts`` holds
    each attempt's failure."""

    def __init__(self, message: str, *, attempts: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.attempts = attempts


class OrganizationNeedsModelError(CatalogError):
    """Semantic organization was asked with only simulated tiers: the simulator answers labelled
    tasks, it cannot propose topics. Configure a real small or large tier, or pass recorded replies."""
