"""Running a logical plan: connect, lower, start model tiers, drive a transactional run, deliver rows.

Which queries journal a run (``semray runs ls`` lists them):

* a plan with semantic operators, always: every batch's answers are committed, so a crash
  or a re-run of the same plan resumes without paying twice;
* every query written to a file (``write_parquet``), models or not: results are staged and
  published atomically, and concurrent writers to one output follow first-committer-wins.

A purely relational query collected in memory pays nothing and publishes nothing: no run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from semray.cluster.connect import connect
from semray.errors import LoweringError, SemrayError
from semray.log import get_logger
from semray.operators.base import Node
from semray.pipeline import materialize
from semray.pipeline.journaled import CancellableLedger, Job, job_to_resume, model_tiers
from semray.pipeline.lower import lower
from semray.pipeline.spec import render_stages
from semray.serving.config import ServingConfig
from semray.serving.deployments import TierHandles, start_tiers
from semray.settings import Settings
from semray.transactions import LLMUsage, OutputTarget, Run, RunCancelledError, open_run, resume_run, show_run

log = get_logger(__name__)

__all__ = [
    "Result",
    "Written",
    "collect",
    "execute",
    "explain_physical",
    "iter_batches",
    "model_tiers",
    "publish_parquet",
    "resume",
    "write_parquet",
]


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

    def usage_line(self) -> str:
        if self.run_id is None:
            return "no model calls"
        return _usage_line(self.run_id, self.usage, self.attempt_usage, self.simulated)


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

    def usage_line(self) -> str:
        return _usage_line(self.run_id, self.usage, self.attempt_usage, self.simulated)


def explain_physical(plan: Node, settings: Settings) -> str:
    try:
        stages = lower(plan, settings)
    except LoweringError as error:
        return f"Physical plan: not available ({error})"
    return "Physical plan (Ray Data)\n" + render_stages(stages)


def execute(plan: Node, settings: Settings, serving: ServingConfig | None = None) -> Result:
    """Run a plan to completion and return its rows with the run's usage."""
    job = Job.prepare(plan, settings, serving)
    connect(settings)
    started = time.perf_counter()
    if not job.tiers:
        table = materialize.collect(job.stages, _schema(job), materialize.ExecutionContext())
        log.info("query_finished", rows=table.num_rows, seconds=round(time.perf_counter() - started, 3))
        return Result(table)
    tiers = _start_tiers(job)
    with _open(job, output=None) as run, _cancellable(run):
        before = _paid(run)
        table = materialize.collect(job.stages, _schema(job), _context(run, tiers))
    return _result(job, run, table, before, started)


def collect(plan: Node, settings: Settings, serving: ServingConfig | None = None) -> pa.Table:
    return execute(plan, settings, serving).table


def iter_batches(
    plan: Node, settings: Settings, batch_rows: int | None = None, serving: ServingConfig | None = None
) -> Iterator[pa.Table]:
    """Stream results; a plan with models runs journaled, and a cancel request stops it between batches."""
    job = Job.prepare(plan, settings, serving)
    connect(settings)
    size = batch_rows or settings.batch_size
    if not job.tiers:
        yield from materialize.iter_batches(job.stages, _schema(job), size, materialize.ExecutionContext())
        return
    tiers = _start_tiers(job)
    with _open(job, output=None) as run, _cancellable(run):
        try:
            for batch in materialize.iter_batches(job.stages, _schema(job), size, _context(run, tiers)):
                run.raise_if_cancelled()
                yield batch
        except GeneratorExit:
            run.finish("cancelled", "the reader stopped before the last batch")
            raise


def write_parquet(plan: Node, settings: Settings, path: Path, serving: ServingConfig | None = None) -> int:
    """Stream results into one Parquet file, published atomically; returns the row count."""
    return publish_parquet(plan, settings, path, serving).rows


def publish_parquet(plan: Node, settings: Settings, path: Path, serving: ServingConfig | None = None) -> Written:
    """Write results through a run: staged next to ``path``, then published with one atomic rename.

    A failed, cancelled or killed run leaves nothing under ``path`` (the previous version, if
    any, stays). Re-running the same plan to the same path resumes an interrupted or failed
    run. Raises ``TransactionConflictError`` when another run published to ``path`` first.
    """
    target = OutputTarget.from_path(path, kind="file")
    Path(target.path).parent.mkdir(parents=True, exist_ok=True)
    job = Job.prepare(plan, settings, serving)
    connect(settings)
    started = time.perf_counter()
    tiers = _start_tiers(job)
    with _open(job, output=target) as run, _cancellable(run):
        before = _paid(run)
        rows, version = _write_and_publish(run, job, tiers)
    return _written(job, run, target, rows, version, before, started)


def resume(settings: Settings, run_id: str, serving: ServingConfig | None = None) -> Result | Written:
    """Resume a run by id (``semray runs resume ID``): execute its journaled plan, skip committed batches.

    The run's lowering settings and serving configuration come from its journal; ``serving``
    replaces the latter (needed when it held in-memory simulator tables). A run whose
    output is a file publishes there (``Written``); one without returns its rows (``Result``).
    Runs over in-memory tables resume only in the process that started them.
    """
    job = job_to_resume(show_run(settings, run_id), settings, serving)
    connect(settings)
    started = time.perf_counter()
    tiers = _start_tiers(job)
    with resume_run(settings, run_id) as run, _cancellable(run):
        before = _paid(run)
        target = run.output
        if target is None:
            table = materialize.collect(job.stages, _schema(job), _context(run, tiers))
        else:
            rows, version = _write_and_publish(run, job, tiers)
    if target is None:
        return _result(job, run, table, before, started)
    return _written(job, run, target, rows, version, before, started)


# internals ------------------------------------------------------------------------------


def _schema(job: Job) -> pa.Schema:
    return job.plan.output_schema.to_arrow()


def _start_tiers(job: Job) -> TierHandles | None:
    if not job.tiers:
        return None
    if job.simulated:
        log.warning("simulated_model_tier", tiers=list(job.tiers), note="answers come from labels, not a model")
    return start_tiers(job.serving, job.settings, tiers=list(job.tiers))


def _open(job: Job, output: OutputTarget | None) -> Run:
    # In-memory tables are per process: a run over one never resumes automatically, since
    # another process may register a different table under the same name.
    return open_run(
        job.settings,
        job.document,
        output,
        config=job.journal_config(),
        plan_fingerprint=job.fingerprint(),
        resume=not job.reads_memory,
    )


@contextlib.contextmanager
def _cancellable(run: Run) -> Iterator[None]:
    """A pipeline that failed after a cancel request was cancelled (actors raise at their next batch)."""
    try:
        yield
    except SemrayError as error:
        # Ray Data reports an actor's RunCancelledError as a failed UDF; the marker says why.
        if not isinstance(error, RunCancelledError) and run.is_cancelled():
            raise RunCancelledError(f"run {run.run_id} was cancelled") from error
        raise


def _context(run: Run, tiers: TierHandles | None) -> materialize.ExecutionContext:
    ledger = CancellableLedger(run.ledger.run_dir, run.attempt)
    return materialize.ExecutionContext(tiers=tiers, ledger=ledger)


def _write_and_publish(run: Run, job: Job, tiers: TierHandles | None) -> tuple[int, str]:
    """Stream the pipeline into the run's staging file, then publish it; (rows, version)."""
    schema = _schema(job)
    context = _context(run, tiers) if tiers is not None else materialize.ExecutionContext()
    rows = 0
    with pq.ParquetWriter(run.staging_path(), schema) as writer:
        for batch in materialize.iter_batches(job.stages, schema, job.settings.batch_size, context):
            run.raise_if_cancelled()
            writer.write_table(batch)
            rows += batch.num_rows
    run.raise_if_cancelled()
    return rows, run.publish()


def _paid(run: Run) -> LLMUsage:
    return run.state().usage


def _result(job: Job, run: Run, table: pa.Table, before: LLMUsage, started: float) -> Result:
    usage = show_run(job.settings, run.run_id).usage
    attempt = _minus(usage, before)
    log.info(
        "query_finished",
        rows=table.num_rows,
        seconds=round(time.perf_counter() - started, 3),
        run_id=run.run_id,
        attempt=run.attempt,
        calls=attempt.calls,
        dollars=attempt.dollars,
    )
    return Result(table, run.run_id, usage, job.simulated, attempt)


def _written(
    job: Job, run: Run, target: OutputTarget, rows: int, version: str, before: LLMUsage, started: float
) -> Written:
    usage = show_run(job.settings, run.run_id).usage
    attempt = _minus(usage, before)
    log.info(
        "parquet_published",
        path=target.path,
        rows=rows,
        version=version,
        seconds=round(time.perf_counter() - started, 3),
        run_id=run.run_id,
        attempt=run.attempt,
        calls=attempt.calls,
    )
    return Written(Path(target.path), rows, run.run_id, version, usage, job.simulated, attempt)


def _minus(total: LLMUsage, before: LLMUsage) -> LLMUsage:
    # Floors at zero: float sums of dollars may differ in the last bit.
    return LLMUsage(
        calls=max(0, total.calls - before.calls),
        tokens_in=max(0, total.tokens_in - before.tokens_in),
        tokens_out=max(0, total.tokens_out - before.tokens_out),
        dollars=max(0.0, total.dollars - before.dollars),
    )


def _usage_line(run_id: str, usage: LLMUsage, attempt: LLMUsage, simulated: bool) -> str:
    tag = " (SIMULATED tier: answers come from labels, not a model)" if simulated else ""
    resumed = f" (this attempt: {attempt.calls} calls, {attempt.dollars:.4f} dollars)" if attempt != usage else ""
    return (
        f"model calls: {usage.calls}, tokens in/out: {usage.tokens_in}/{usage.tokens_out}, "
        f"dollars: {usage.dollars:.4f}{resumed}{tag}; run {run_id}"
    )
