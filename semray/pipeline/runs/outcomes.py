"""What a run gives back: a query's ``Result``, a published file's ``Written``, and the stream of
``Query.iter_batches`` (``ResultBatches``), each with what its model calls cost.

>>> Result(pa.table({"a": [1]})).usage_line()
'no model calls'
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from semray.cost_model.statistics import PlanStatistics
from semray.operators.base import Node
from semray.pipeline.runs.measure_in_run import MeasuredRun
from semray.pipeline.workers.failed_rows import FailedRows
from semray.transactions import LLMUsage


@dataclass(frozen=True, slots=True)
class Result:
    """Rows of a finished query, and what its model calls cost (``run_id`` None: no run).

    ``usage`` is everything the run paid over all its attempts; ``attempt_usage`` what this
    attempt paid (less when it resumed committed batches).
    """

    table: pa.Table
    run_id: str | None = None
    usage: LLMUsage = field(default_factory=LLMUsage)
    simulated: bool = False
    attempt_usage: LLMUsage = field(default_factory=LLMUsage)
    measured: MeasuredRun | None = None
    """What the run measured before planning (``measure=True``), with what measuring cost."""
    plan: Node | None = None
    """The plan that ran (after the optimizer, when the run chose it from measured statistics)."""
    operator_rows: dict[str, int] = field(default_factory=dict)
    """Rows each operator passed on in this attempt, by operator key (``operators/keys.operator_key``);
    operators that keep every row are not counted (they pass on their input's count)."""
    failures: FailedRows = field(default_factory=FailedRows)
    """Rows each semantic operator asked about and how many got no answer (over all attempts)."""
    warnings: tuple[str, ...] = ()
    """Quality targets the plan asked for but could not meet as asked (``quality_warnings``)."""
    factorization_check: LLMUsage = field(default_factory=LLMUsage)
    """What the query's join factorization check paid before the run (counted in ``usage`` too)."""

    @property
    def statistics(self) -> PlanStatistics | None:
        """The statistics the optimizer used, when the run measured them."""
        return self.measured.statistics if self.measured is not None else None

    @property
    def failed_rows(self) -> int:
        """Rows that got no answer, all operators together (0 for a clean run)."""
        return self.failures.total

    def usage_line(self) -> str:
        if self.run_id is None:
            return "no model calls"
        return usage_line(self)

    def failed_line(self) -> str:
        """``WARNING: 12 rows failed: ...`` when rows got no answer, else ""."""
        return self.failures.warning(self.run_id)


@dataclass(frozen=True, slots=True)
class Written:
    """A result published atomically to ``path`` by run ``run_id`` as output ``version``."""

    path: Path
    rows: int
    run_id: str
    version: str
    usage: LLMUsage = field(default_factory=LLMUsage)
    simulated: bool = False
    attempt_usage: LLMUsage = field(default_factory=LLMUsage)
    measured: MeasuredRun | None = None
    failures: FailedRows = field(default_factory=FailedRows)
    factorization_check: LLMUsage = field(default_factory=LLMUsage)

    @property
    def failed_rows(self) -> int:
        return self.failures.total

    def usage_line(self) -> str:
        return usage_line(self)

    def failed_line(self) -> str:
        return self.failures.warning(self.run_id)


def minus_usage(total: LLMUsage, before: LLMUsage) -> LLMUsage:
    # Floors at zero: float sums of dollars may differ in the last bit.
    return LLMUsage(
        calls=max(0, total.calls - before.calls),
        tokens_in=max(0, total.tokens_in - before.tokens_in),
        tokens_out=max(0, total.tokens_out - before.tokens_out),
        dollars=max(0.0, total.dollars - before.dollars),
    )


def usage_line(outcome: Result | Written) -> str:
    usage, attempt, measured = outcome.usage, outcome.attempt_usage, outcome.measured
    tag = " (SIMULATED tier: answers come from labels, not a model)" if outcome.simulated else ""
    resumed = f" (this attempt: {attempt.calls} calls, {attempt.dollars:.4f} dollars)" if attempt != usage else ""
    measuring = ""
    if measured is not None:
        measuring = (
            f"; measuring: {measured.labels} labels ({measured.usage.calls} calls, "
            f"{measured.usage.dollars:.4f} dollars), not paid again at execution"
        )
    if (check := outcome.factorization_check).calls:
        measuring += f"; join factorization check: {check.calls} calls, {check.dollars:.4f} dollars (a run apart)"
    return (
        f"model calls: {usage.calls}, tokens in/out: {usage.tokens_in}/{usage.tokens_out}, "
        f"dollars: {usage.dollars:.4f}{resumed}{measuring}{tag}; run {outcome.run_id}"
    )


@dataclass(frozen=True, slots=True)
class StreamedRun:
    """What a streamed run paid, known once its last batch is out: its id and its usage, all attempts."""

    run_id: str
    usage: LLMUsage


class ResultBatches(Iterator[pa.Table]):
    """The batches of ``Query.iter_batches``, and what they cost once read to the end.

    ``factorization_check`` is what the query's join factorization check paid before the first
    batch (a run apart, as ``Result.factorization_check``). ``usage`` and ``run_id`` are None until
    the last batch is read; then ``usage`` is everything the query paid, the check included (as
    ``Result.usage``), and ``run_id`` the run's id (None for a query without models: no run).
    A stream left before its end is cancelled and says nothing more.

    >>> stream = ResultBatches(iter([pa.table({"a": [1]})]), LLMUsage(calls=3))
    >>> [batch.num_rows for batch in stream], stream.usage.calls, stream.run_id
    ([1], 3, None)
    """

    def __init__(
        self,
        batches: Generator[pa.Table, None, StreamedRun | None] | Iterator[pa.Table],
        factorization_check: LLMUsage,
        keep: Callable[[pa.Table], pa.Table] = lambda batch: batch,
    ) -> None:
        self._batches = batches
        self._keep = keep
        self.factorization_check = factorization_check
        self.usage: LLMUsage | None = None
        self.run_id: str | None = None

    def __iter__(self) -> ResultBatches:
        return self

    def __next__(self) -> pa.Table:
        try:
            batch = next(self._batches)
        except StopIteration as end:
            if self.usage is None:
                streamed = end.value if isinstance(end.value, StreamedRun) else None
                ran = streamed.usage if streamed is not None else LLMUsage()
                self.run_id = streamed.run_id if streamed is not None else None
                self.usage = ran + self.factorization_check
            raise
        return self._keep(batch)

    def close(self) -> None:
        """Stop reading: a run still streaming is cancelled (``Run.finish("cancelled", ...)``)."""
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()
