"""Running a logical plan: connect, lower, start model tiers, drive a transactional run, deliver rows.

Which queries journal a run (``semray runs ls`` lists them):

* a plan with semantic operators, always: every batch's answers are committed, so a crash
  or a re-run of the same plan resumes without paying twice;
* every query written to a file (``write_parquet``), models or not: results are staged and
  published atomically, and concurrent writers to one output follow first-committer-wins.

A purely relational query collected in memory pays nothing and publishes nothing: no run.

Given a ``Planning`` (``Query.execute(policy=..., measure=True)``), a run with models first
measures its statistics (``semray.pipeline.runs.measure_in_run``: labels journaled in the run's ledger),
then lets the optimizer choose the plan with them and executes that plan in the same run; the
labels bought while measuring are reused, not asked again.

Rows that got no answer are counted per operator in the run's journal. Past
``Settings.max_error_rate`` of an operator's rows, the run fails with ``FailedRowsError`` (and
publishes nothing); below it, ``Result.failures`` and ``Result.failed_line()`` say how many failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from semray.cluster.connect import connect
from semray.cluster.release import release_pipeline
from semray.cost_model.statistics import PlanStatistics
from semray.errors import LoweringError, SemrayError
from semray.log import get_logger
from semray.operators.base import Node
from semray.pipeline.lowering.driver import lower
from semray.pipeline.ray import materialize
from semray.pipeline.runs.actor_ledger import CancellableLedger, actor_ledger
from semray.pipeline.runs.budget import Forecast, check_forecast, forecast, in_flight_batches
from semray.pipeline.runs.measure_in_run import MeasuredRun, Planning, measure_plan, seed_of
from semray.pipeline.runs.outcomes import Result, StreamedRun, Written, minus_usage
from semray.pipeline.runs.progress import LogReporter, ProgressReporter, RunWatcher
from semray.pipeline.runs.resume_record import Job, job_to_resume, model_tiers
from semray.pipeline.stages.base import render_stages
from semray.pipeline.workers.failed_rows import FailedRows, check_failed_rows, failed_rows, operator_labels
from semray.pipeline.workers.metering import operator_tags
from semray.serving.config import ServingConfig
from semray.serving.deployments import TierHandles, response_cache_in_store, start_tiers
from semray.settings import Settings
from semray.transactions import (
    LLMUsage,
    OutputTarget,
    Run,
    RunCancelledError,
    RunStateError,
    fingerprint,
    open_run,
    resume_run,
    show_run,
)
from semray.transactions.registry import stopped_error

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


def explain_physical(plan: Node, settings: Settings) -> str:
    try:
        stages = lower(plan, settings)
    except LoweringError as error:
        return f"Physical plan: not available ({error})"
    return "Physical plan (Ray Data)\n" + render_stages(stages)


def execute(
    plan: Node,
    settings: Settings,
    serving: ServingConfig | None = None,
    planning: Planning | None = None,
    progress: ProgressReporter | None = None,
) -> Result:
    """Run a plan to completion and return its rows with the run's usage.

    With ``planning``, the run measures statistics on ``plan`` first and executes the plan
    ``planning.choose`` makes of them (see the module docstring). ``progress`` shows the run's
    progress and cost while it runs (default: ``run_progress`` log lines, ``Settings.progress_interval_s``);
    ``Settings.max_cost`` is its budget (``semray.pipeline.runs.budget``).
    """
    plan, planning = _without_models(plan, settings, serving, planning)
    if planning is not None:
        started = time.perf_counter()
        with _measured_run(plan, settings, serving, planning, None, progress) as (run, job, handles, measured):
            before = _paid(run)
            table, rows = _collect(job, _context(run, handles))
            failures = _failures(run, job)
        return _result(job, run, table, rows, before, started, failures, measured)
    job = Job.prepare(plan, settings, serving)
    if not job.tiers:
        connect(settings)
        started = time.perf_counter()
        table, rows = _collect(job, materialize.ExecutionContext())
        log.info("query_finished", rows=table.num_rows, seconds=round(time.perf_counter() - started, 3))
        return Result(table, operator_rows=rows)
    expected = _forecast(job)
    with _open(job, output=None) as run, _cancellable(run), _watched(run, job, expected, progress):
        started, tiers = _connect_and_start_tiers(job)
        before = _paid(run)
        table, rows = _collect(job, _context(run, tiers))
        failures = _failures(run, job)
    return _result(job, run, table, rows, before, started, failures)


def collect(
    plan: Node, settings: Settings, serving: ServingConfig | None = None, planning: Planning | None = None
) -> pa.Table:
    return execute(plan, settings, serving, planning).table


def iter_batches(
    plan: Node,
    settings: Settings,
    batch_rows: int | None = None,
    serving: ServingConfig | None = None,
    planning: Planning | None = None,
    progress: ProgressReporter | None = None,
) -> Generator[pa.Table, None, StreamedRun | None]:
    """Stream results; a plan with models runs journaled, and a cancel request stops it between
    batches. Returns (``StopIteration.value``, as ``ResultBatches`` reads it) what the run paid."""
    plan, planning = _without_models(plan, settings, serving, planning)
    size = batch_rows or settings.batch_size
    if planning is not None:
        with _measured_run(plan, settings, serving, planning, None, progress) as (run, job, handles, _):
            return (yield from _stream(run, job, handles, size))
    job = Job.prepare(plan, settings, serving)
    if not job.tiers:
        connect(settings)
        yield from materialize.iter_batches(job.stages, _schema(job), size, materialize.ExecutionContext())
        return None
    expected = _forecast(job)
    with _open(job, output=None) as run, _cancellable(run), _watched(run, job, expected, progress):
        _, tiers = _connect_and_start_tiers(job)
        return (yield from _stream(run, job, tiers, size))


def _stream(run: Run, job: Job, tiers: TierHandles | None, size: int) -> Generator[pa.Table, None, StreamedRun]:
    try:
        for batch in materialize.iter_batches(job.stages, _schema(job), size, _context(run, tiers)):
            run.raise_if_cancelled()
            yield batch
        _failures(run, job)  # the batches are out; past max_error_rate the run still ends failed
    except GeneratorExit:
        run.finish("cancelled", "the reader stopped before the last batch")
        raise
    return StreamedRun(run.run_id, show_run(job.settings, run.run_id).usage)  # every batch is committed


def write_parquet(
    plan: Node, settings: Settings, path: Path, serving: ServingConfig | None = None, planning: Planning | None = None
) -> int:
    """Stream results into one Parquet file, published atomically; returns the row count."""
    return publish_parquet(plan, settings, path, serving, planning).rows


def publish_parquet(
    plan: Node,
    settings: Settings,
    path: Path,
    serving: ServingConfig | None = None,
    planning: Planning | None = None,
    progress: ProgressReporter | None = None,
) -> Written:
    """Write results through a run: staged next to ``path``, then published with one atomic rename.

    A failed, cancelled or killed run leaves nothing under ``path`` (the previous version, if
    any, stays). Re-running the same plan to the same path resumes an interrupted or failed
    run. Raises ``TransactionConflictError`` when another run published to ``path`` first.
    """
    target = OutputTarget.from_path(path, kind="file")
    Path(target.path).parent.mkdir(parents=True, exist_ok=True)
    plan, planning = _without_models(plan, settings, serving, planning)
    if planning is not None:
        started = time.perf_counter()
        with _measured_run(plan, settings, serving, planning, target, progress) as (run, job, handles, measured):
            before = _paid(run)
            rows, version, failures = _write_and_publish(run, job, handles)
        return _written(job, run, target, rows, version, before, started, failures, measured)
    job = Job.prepare(plan, settings, serving)
    expected = _forecast(job)
    with _open(job, output=target) as run, _cancellable(run), _watched(run, job, expected, progress):
        started, tiers = _connect_and_start_tiers(job)
        before = _paid(run)
        rows, version, failures = _write_and_publish(run, job, tiers)
    return _written(job, run, target, rows, version, before, started, failures)


def resume(
    settings: Settings, run_id: str, serving: ServingConfig | None = None, progress: ProgressReporter | None = None
) -> Result | Written:
    """Resume a run by id (``semray runs resume ID``): execute its journaled plan, skip committed batches.

    The run's lowering settings and serving configuration come from its journal; ``serving``
    replaces the latter (needed when it held in-memory simulator tables). A run whose
    output is a file publishes there (``Written``); one without returns its rows (``Result``).
    Runs over in-memory tables resume only in the process that started them. ``settings.max_cost``
    is the resumed run's budget (over everything it paid, all attempts: a run stopped at its budget
    resumes with a higher one).
    """
    detail = show_run(settings, run_id)
    if detail.config.get("measure") is not None:
        raise RunStateError(
            f"run {run_id} measured its statistics before choosing its plan; run the same query again "
            "with measure=True (and the same policy): it resumes this run and pays nothing twice"
        )
    job = job_to_resume(detail, settings, serving)
    expected = _forecast(job, paid=detail.usage.dollars, done=detail.rows_committed, run_id=run_id)
    with resume_run(settings, run_id) as run, _cancellable(run), _watched(run, job, expected, progress):
        started, tiers = _connect_and_start_tiers(job)
        before = _paid(run)
        target = run.output
        if target is None:
            table, rows = _collect(job, _context(run, tiers))
            failures = _failures(run, job)
        else:
            written, version, failures = _write_and_publish(run, job, tiers)
    if target is None:
        return _result(job, run, table, rows, before, started, failures)
    return _written(job, run, target, written, version, before, started, failures)


# internals ------------------------------------------------------------------------------


def _without_models(
    plan: Node, settings: Settings, serving: ServingConfig | None, planning: Planning | None
) -> tuple[Node, Planning | None]:
    """A plan that calls no model has nothing to measure: plan it on no statistics."""
    if planning is None or Job.prepare(plan, settings, serving).tiers:
        return plan, planning
    return planning.choose(PlanStatistics()), None


@contextlib.contextmanager
def _measured_run(
    plan: Node,
    settings: Settings,
    serving: ServingConfig | None,
    planning: Planning,
    output: OutputTarget | None,
    progress: ProgressReporter | None = None,
) -> Iterator[tuple[Run, Job, TierHandles, MeasuredRun]]:
    """Open (or resume) the run of ``plan`` measured under ``planning``, measure, choose the plan.

    The run journals the measured plan, so re-running the same query with the same planning
    resumes it: the same run id, the same pre-sample and draws, every label found in the ledger.
    """
    written = Job.prepare(plan, settings, serving)
    wanted = sorted(set(written.tiers) | set(planning.options.tiers))
    identity = fingerprint({"plan": written.fingerprint(), "measure": planning.to_json()})
    config = {**_journal_config(written), "measure": planning.to_json()}
    run = open_run(
        settings, written.document, output, config=config, plan_fingerprint=identity, resume=not written.reads_memory
    )
    # Not estimated before measuring (the measured statistics choose the plan), but watched: its
    # progress and cost show, and a budget stops it.
    with run, _cancellable(run), _watched(run, written, None, progress):
        connect(settings)  # once the attempt has begun, as in _connect_and_start_tiers
        if written.simulated:
            log.warning("simulated_model_tier", tiers=wanted, note="answers come from labels, not a model")
        tiers = start_tiers(written.serving, settings, tiers=wanted)
        measured = measure_plan(plan, settings, tiers, _ledger(run), planning.options, seed_of(run.run_id))
        run.record_estimates({"measured": measured.to_json(), "policy": planning.policy})
        job = Job.prepare(planning.choose(measured.statistics), settings, written.serving)
        if missing := set(job.tiers) - set(wanted):
            tiers = start_tiers(job.serving, settings, tiers=sorted(set(wanted) | missing))
        log.info("plan_chosen", run_id=run.run_id, policy=planning.policy, physical=render_stages(job.stages))
        yield run, job, tiers, measured


def _schema(job: Job) -> pa.Schema:
    return job.plan.output_schema.to_arrow()


def _connect_and_start_tiers(job: Job) -> tuple[float, TierHandles | None]:
    """Connect Ray and start the tiers; returns when Ray was up (a query's seconds count from
    there) and the tiers.

    Called once the run's attempt has begun: a resume then fences off the workers of the
    attempt it replaces (actors of a killed driver still paying for batches) at once, not after
    the seconds Ray and Serve take to start (docs/transactions.md, "Fencing").
    """
    connect(job.settings)
    return time.perf_counter(), _start_tiers(job)


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
        config=_journal_config(job),
        plan_fingerprint=job.fingerprint(),
        resume=not job.reads_memory,
    )


def _journal_config(job: Job) -> dict[str, Any]:
    """What the run journals about the job, with each model-calling operator's label, by key, for
    ``semray runs show`` (which reads the journal only)."""
    labels = {key: label for key, (label, _) in operator_labels(job.plan, job.stages).items()}
    return {**job.journal_config(), "operator_labels": labels, "operator_metrics": operator_tags(job.stages)}


def _failures(run: Run, job: Job) -> FailedRows:
    """The failed rows of the plan's operators as the journal counts them (all attempts);
    raises ``FailedRowsError`` when an operator's share is over ``max_error_rate``."""
    failures = failed_rows(run.state().operators.values(), operator_labels(job.plan, job.stages))
    for operator in failures.failing:
        log.warning(
            "operator_rows_failed",
            run_id=run.run_id,
            operator=operator.operator,
            failed=operator.failed,
            attempted=operator.attempted,
            reasons={reason.reason: reason.rows for reason in operator.reasons},
        )
    check_failed_rows(failures, job.settings.max_error_rate)
    return failures


@contextlib.contextmanager
def _cancellable(run: Run) -> Iterator[None]:
    """A pipeline that failed after a cancel request was cancelled (actors raise at their next batch).

    A pipeline that ended with an error (a budget stop, a cancel, a failure) lets go of its executor
    before the error leaves (``release_pipeline``; ``KillActorsOnFailure`` killed its actors): a
    resume in the same process needs their CPUs.
    """
    try:
        yield
    except (Exception, KeyboardInterrupt) as error:
        release_pipeline(error)
        # Ray Data reports an actor's RunCancelledError as a failed UDF; the marker says why.
        if isinstance(error, SemrayError) and not isinstance(error, RunCancelledError) and run.is_cancelled():
            raise stopped_error(run.path) from error
        raise


def _forecast(job: Job, paid: float = 0.0, done: int = 0, run_id: str = "") -> Forecast | None:
    """The cost model's forecast of the job's model calls, checked against its budget
    (``BudgetError`` before anything starts; on a resume, against what is left of it)."""
    expected = forecast(job.plan, job.serving) if job.tiers else None
    share = done / expected.rows if expected is not None and expected.rows else 0.0
    check_forecast(expected, job.settings.max_cost, paid=paid, done_share=share, run_id=run_id)
    return expected


@contextlib.contextmanager
def _watched(run: Run, job: Job, expected: Forecast | None, progress: ProgressReporter | None) -> Iterator[None]:
    """Journal the forecast, then tail the journal while the pipeline runs (``RunWatcher``):
    progress and cost to ``progress`` and the dashboard, the budget enforced between batches. With a
    state URI, the tiers' new cache entries are copied to the store meanwhile and at the end
    (``response_cache_in_store``)."""
    if expected is not None:
        run.record_estimates(
            {"forecast": dataclasses.asdict(expected)}, expected_rows=expected.rows, expected_dollars=expected.dollars
        )
    reporter = progress if progress is not None else LogReporter(job.settings.progress_interval_s)
    with (
        response_cache_in_store(job.serving, job.settings),
        RunWatcher(
            run.path,
            reporter,
            budget=job.settings.max_cost,
            in_flight=in_flight_batches(job.stages),
            stop=run.request_stop,
            merge=run.merge_commits,
            attempt=run.attempt,
        ),
    ):
        yield


def _ledger(run: Run) -> CancellableLedger:
    return actor_ledger(run.ledger)


def _context(run: Run, tiers: TierHandles | None) -> materialize.ExecutionContext:
    return materialize.ExecutionContext(tiers=tiers, ledger=_ledger(run))


def _collect(job: Job, context: materialize.ExecutionContext) -> tuple[pa.Table, dict[str, int]]:
    """Run the pipeline to a table; with the rows each operator passed on (when counted)."""
    context = materialize.counting(context, job.settings.state_path) if _counts_rows(job) else context
    try:
        table = materialize.collect(job.stages, _schema(job), context)
    finally:
        rows = materialize.counted_rows(context)  # taken on failure too: no count file is left behind
    return table, rows


def _counts_rows(job: Job) -> bool:
    """Count each operator's rows: ``count_rows`` on, or auto and the plan calls models."""
    return job.settings.count_rows == "on" or (job.settings.count_rows == "auto" and bool(job.tiers))


def _write_and_publish(run: Run, job: Job, tiers: TierHandles | None) -> tuple[int, str, FailedRows]:
    """Stream the pipeline into the run's staging file, then publish it unless too many rows
    failed; (rows, version, failed rows). Operators' rows are not counted: nothing explains a
    published run."""
    schema = _schema(job)
    context = _context(run, tiers) if tiers is not None else materialize.ExecutionContext()
    rows = 0
    batches = materialize.iter_batches(job.stages, schema, job.settings.batch_size, context)
    # Closed on the way out (a cancel or budget stop raises mid-stream): the pipeline's actor
    # pools end now, not when the traceback is collected.
    with pq.ParquetWriter(run.staging_path(), schema) as writer, contextlib.closing(batches):
        for batch in batches:
            run.raise_if_cancelled()
            writer.write_table(batch)
            rows += batch.num_rows
    run.raise_if_cancelled()
    failures = _failures(run, job)
    return rows, run.publish(), failures


def _paid(run: Run) -> LLMUsage:
    return run.state().usage


def _result(
    job: Job,
    run: Run,
    table: pa.Table,
    operator_rows: dict[str, int],
    before: LLMUsage,
    started: float,
    failures: FailedRows,
    measured: MeasuredRun | None = None,
) -> Result:
    usage = show_run(job.settings, run.run_id).usage
    attempt = minus_usage(usage, before)
    log.info(
        "query_finished",
        rows=table.num_rows,
        seconds=round(time.perf_counter() - started, 3),
        run_id=run.run_id,
        attempt=run.attempt,
        calls=attempt.calls,
        dollars=attempt.dollars,
        failed_rows=failures.total,
    )
    return Result(table, run.run_id, usage, job.simulated, attempt, measured, job.plan, operator_rows, failures)


def _written(
    job: Job,
    run: Run,
    target: OutputTarget,
    rows: int,
    version: str,
    before: LLMUsage,
    started: float,
    failures: FailedRows,
    measured: MeasuredRun | None = None,
) -> Written:
    usage = show_run(job.settings, run.run_id).usage
    attempt = minus_usage(usage, before)
    log.info(
        "parquet_published",
        path=target.path,
        rows=rows,
        version=version,
        seconds=round(time.perf_counter() - started, 3),
        run_id=run.run_id,
        attempt=run.attempt,
        calls=attempt.calls,
        failed_rows=failures.total,
    )
    return Written(Path(target.path), rows, run.run_id, version, usage, job.simulated, attempt, measured, failures)
