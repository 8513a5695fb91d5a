"""Physical stages -> a Ray Data pipeline. The only module that imports ray.data."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import ray
import ray.data as rd
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask
from ray.exceptions import RayError, RayTaskError

from semray.errors import ExecutionError, LoweringError, SemrayError, SourceError
from semray.pipeline.limit_rounds import limited_rows
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.relational import (
    PARTITION,
    BatchSqlStage,
    BroadcastJoinStage,
    GatherSqlStage,
    GrowingLimitStage,
    JoinStage,
    LimitStage,
    PartitionedSqlStage,
    ReadStage,
    SortStage,
    UnionStage,
)
from semray.pipeline.stages.semantic import ROUND_STAGES, CascadeStage, SemanticStage
from semray.pipeline.workers.batch_sql import empty_table, run_sql
from semray.pipeline.workers.metering import named_udf, operator_name
from semray.pipeline.workers.row_counts import RowCounts, count_rows, new_execution, take_counts
from semray.pipeline.workers.semantic_batches import SemanticBatchUDF
from semray.serving.deployments import TierHandles
from semray.sources import open_source
from semray.transactions import BatchLedger


@dataclass(frozen=True, slots=True)
class ExecutionContext:
    """What stages need beyond their own spec: model tiers, the run's batch ledger, and where to
    count each operator's rows (``row_counts``, set by ``counting``; None: nothing is counted)."""

    tiers: TierHandles | None = None
    ledger: BatchLedger | None = None
    actor_cpus: float = 0.25
    """CPUs each semantic actor reserves (see ``with_actor_budget``)."""
    row_counts: RowCounts | None = None


def counting(context: ExecutionContext, state_path: Path) -> ExecutionContext:
    """``context`` with its operators' rows counted (in a file under ``state_path``); read them
    with ``counted_rows`` once it ran."""
    return dataclasses.replace(context, row_counts=new_execution(state_path))


def counted_rows(context: ExecutionContext) -> dict[str, int]:
    """The rows each counted operator (by operator key) passed on in this execution, once."""
    return take_counts(context.row_counts) if context.row_counts is not None else {}


TASK_CPUS = 0.5
"""Read and SQL tasks reserve half a CPU: beside Serve replicas (0.2-0.3 each) and
semantic actors, a whole CPU per task would leave none schedulable on a 2-CPU machine.
DuckDB runs one thread per task, so two such tasks share a core."""

SEMANTIC_ACTOR_CPUS = 0.5
"""All semantic actors of a plan share this many CPUs: they wait on model calls, and the
rest must stay free for read and SQL tasks (1 CPU each), or a chain of semantic operators
on a 2-CPU machine deadlocks with every CPU held by idle actors."""


def with_actor_budget(stage: Stage, context: ExecutionContext) -> ExecutionContext:
    actors = _count_actors(stage)
    if not actors:
        return context
    return dataclasses.replace(context, actor_cpus=min(0.25, SEMANTIC_ACTOR_CPUS / actors))


def _count_actors(stage: Stage) -> int:
    own = stage.actors if isinstance(stage, SemanticStage) else 0
    return own + sum(_count_actors(child) for child in stage.inputs)


def materialize(stage: Stage, context: ExecutionContext | None = None) -> rd.Dataset:
    """Build (lazily) the Ray Data pipeline for a physical plan (``context`` as given by
    ``with_actor_budget`` for the whole plan)."""
    builder = BUILDERS.get(type(stage))
    if builder is None:
        raise LoweringError(f"no Ray Data builder for stage {type(stage).__name__}")
    context = context or ExecutionContext()
    dataset = builder(stage, context)
    # A semantic stage's actors count their own output: one more step after the actor pool
    # would let it run on while a LIMIT above waits for that step.
    counted_inside = type(stage) is SemanticStage
    if not stage.operators or context.row_counts is None or counted_inside:
        return dataset
    # Ray Data's stubs take only one-argument functions; fn_args is how Ray passes the rest.
    return dataset.map_batches(
        count_rows,  # type: ignore[arg-type]
        fn_args=(context.row_counts, stage.operators),
        batch_format="pyarrow",
        batch_size=None,
        zero_copy_batch=True,
        num_cpus=TASK_CPUS,
    )


class SourceDatasource(Datasource):
    """Ray Data datasource over a semray source's read tasks (stable row ids included)."""

    def __init__(self, stage: ReadStage) -> None:
        self._stage = stage
        source = stage.source
        self._tasks = open_source(source.kind, source.path, source.options).read_tasks(stage.columns, stage.batch_rows)

    @property
    def tasks(self) -> list[Any]:
        return self._tasks

    @property
    def task_count(self) -> int:
        return len(self._tasks)

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_name(self) -> str:
        return f"Read[{self._stage.source.kind}]"

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        del parallelism, data_context
        return [
            ReadTask(
                read_fn=_iterate(task),
                metadata=BlockMetadata(
                    num_rows=task.estimated_rows,
                    size_bytes=task.estimated_bytes,
                    exec_stats=None,
                    input_files=task.input_files or None,
                ),
                per_task_row_limit=per_task_row_limit,
            )
            for task in self._tasks
        ]


def _iterate(task: Callable[[], Iterator[pa.Table]]) -> Callable[[], Iterator[pa.Table]]:
    def read() -> Iterator[pa.Table]:
        yield from task()

    return read


def build_read(stage: Stage, context: ExecutionContext) -> rd.Dataset:
    assert isinstance(stage, ReadStage)
    try:
        datasource = SourceDatasource(stage)
    except FileNotFoundError as error:
        raise SourceError(str(error)) from None
    _size_blocks_like_batches(datasource, stage.batch_rows)
    # One block stream per read task: Ray would otherwise split outputs to reach its
    # default parallelism (200 blocks for 1,000 rows, each a scheduled task downstream).
    dataset: rd.Dataset = rd.read_datasource(
        datasource, override_num_blocks=max(1, datasource.task_count), num_cpus=TASK_CPUS
    )
    return dataset


MIN_BLOCK_BYTES = 64 * 1024
DEFAULT_BLOCK_BYTES = rd.DataContext().target_max_block_size


def _reset_block_size() -> None:
    """Each query sizes its blocks from its own reads (see _size_blocks_like_batches).

    Also: a task's own exception, not Ray Data's ``UserCodeException`` around it, crosses to
    the driver. The wrapper's ``__cause__`` does not survive pickling, so with it the driver
    would see only "UDF failed to process a data block" (see ``reported_failures``).
    """
    context = rd.DataContext.get_current()
    context.target_max_block_size = DEFAULT_BLOCK_BYTES
    context.raise_original_map_exception = True


def _size_blocks_like_batches(datasource: SourceDatasource, batch_rows: int) -> None:
    """Make a Ray block hold about one semray batch.

    Ray merges what a read task yields until a block reaches target_max_block_size
    (128 MiB by default), so a LIMIT or a semantic operator would wait for a whole
    task's rows. Blocks of about ``batch_rows`` rows keep the pipeline streaming.
    """
    rows = sum(task.estimated_rows or 0 for task in datasource.tasks)
    size = sum(task.estimated_bytes or 0 for task in datasource.tasks)
    if not rows or not size:
        return
    context = rd.DataContext.get_current()
    wanted = max(MIN_BLOCK_BYTES, int(batch_rows * size / rows))
    if context.target_max_block_size is None or wanted < context.target_max_block_size:
        context.target_max_block_size = wanted


def build_batch_sql(stage: Stage, context: ExecutionContext) -> rd.Dataset:
    assert isinstance(stage, BatchSqlStage)
    upstream = materialize(stage.inputs[0], context)
    return upstream.map_batches(
        run_sql,  # type: ignore[arg-type]
        fn_args=(stage.sql,),
        batch_format="pyarrow",
        batch_size=None,
        zero_copy_batch=True,
        num_cpus=TASK_CPUS,
    )


def build_gather_sql(stage: Stage, context: ExecutionContext) -> rd.Dataset:
    assert isinstance(stage, GatherSqlStage)
    return rd.from_arrow_refs([_gathered(stage.inputs[0], stage.input_columns, context, stage.sql)])


def _gathered(
    stage: Stage, columns: tuple[tuple[str, str], ...], context: ExecutionContext, sql: str = "SELECT * FROM batch"
) -> Any:
    """Run the upstream pipeline, then ``sql`` over all its rows in one task; an ObjectRef."""
    with reported_failures():
        refs = materialize(stage, context).to_arrow_refs()
    return _run_on_all.remote(sql, columns, *refs)


def build_broadcast_join(stage: Stage, context: ExecutionContext) -> rd.Dataset:
    assert isinstance(stage, BroadcastJoinStage)
    left, right = stage.inputs
    right_table = _gathered(right, stage.right_columns, context)
    return materialize(left, context).map_batches(
        _join_batch,  # type: ignore[arg-type]
        fn_args=(right_table, stage.sql),
        batch_format="pyarrow",
        batch_size=None,
        zero_copy_batch=True,
        num_cpus=TASK_CPUS,
    )


def _join_batch(batch: pa.Table, right: Any, sql: str) -> pa.Table:
    # Ray Data passes ObjectRefs in fn_args through unresolved; the object store
    # serves repeated gets of the same table zero-copy.
    table = ray.get(right) if isinstance(right, ray.ObjectRef) else right
    return run_sql(batch, sql, right_side=table)


def build_partitioned_sql(stage: Stage, context: ExecutionContext) -> rd.Dataset:
    assert isinstance(stage, PartitionedSqlStage)
    upstream = materialize(stage.inputs[0], context)
    return upstream.groupby(PARTITION, num_partitions=stage.num_partitions).map_groups(
        _run_partition,  # type: ignore[arg-type]
        fn_args=(stage.sql,),
        batch_format="pyarrow",
        num_cpus=TASK_CPUS,
    )


def _run_partition(batch: pa.Table, sql: str) -> pa.Table:
    return run_sql(batch.drop_columns([PARTITION]), sql)


@ray.remote(num_cpus=0.5)
def _run_on_all(sql: str, columns: tuple[tuple[str, str], ...], *tables: pa.Table) -> pa.Table:
    parts = [table for table in tables if table.num_rows]
    batch = pa.concat_tables(parts, promote_options="default") if parts else empty_table(columns)
    return run_sql(batch, sql)


def build_join(stage: Stage, context: ExecutionContext) -> rd.Dataset:
    assert isinstance(stage, JoinStage)
    left, right = (materialize(child, context) for child in stage.inputs)
    return left.join(
        right,
        join_type=stage.kind,
        num_partitions=stage.num_partitions,
        on=stage.left_keys,  # type: ignore[arg-type]  # the stub says tuple[str], any length works
        right_on=stage.right_keys,  # type: ignore[arg-type]
    )


def build_sort(stage: Stage, context: ExecutionContext) -> rd.Dataset:
    assert isinstance(stage, SortStage)
    return materialize(stage.inputs[0], context).sort(list(stage.columns), descending=list(stage.descending))


def build_limit(stage: Stage, context: ExecutionContext) -> rd.Dataset:
    assert isinstance(stage, LimitStage)
    upstream = materialize(stage.inputs[0], context).limit(stage.count + stage.offset)
    if not stage.offset:
        return upstream
    # Ray Data has no OFFSET: keep the first offset+count rows (in order) and slice.
    table = _concat(upstream.to_arrow_refs())
    return rd.from_arrow(table.slice(stage.offset, stage.count))


def build_growing_limit(stage: Stage, context: ExecutionContext) -> rd.Dataset:
    """Run the semantic chain under the LIMIT on the driver in growing round trips (see
    ``limit_rounds``); what lies under the chain streams, and stops once the rounds are done."""
    assert isinstance(stage, GrowingLimitStage)
    steps: list[Callable[[pa.Table], pa.Table]] = []
    below = stage.inputs[0]
    while type(below) in ROUND_STAGES:
        steps.append(_driver_step(below, context))
        below = below.inputs[0]
    steps.reverse()
    wanted = stage.count + stage.offset
    with reported_failures():
        batches = materialize(below, context).iter_batches(batch_size=None, batch_format="pyarrow")
        try:
            outputs = limited_rows(iter(batches), steps, wanted, stage.first_rows, stage.growth, stage.max_rows)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()  # stops the stream under the chain
    if not outputs:
        return rd.from_arrow(pa.table({}))
    table = pa.concat_tables(outputs, promote_options="default")
    return rd.from_arrow(table.slice(stage.offset, stage.count))


def _driver_step(stage: Stage, context: ExecutionContext) -> Callable[[pa.Table], pa.Table]:
    """One stage of a chain under a ``GrowingLimitStage`` as a function of a batch, counting the
    rows of its operators as ``materialize`` would."""
    if type(stage) is CascadeStage:
        from semray.pipeline.cascade import cascade_rounds

        return cascade_rounds(stage, context)
    if isinstance(stage, SemanticStage):
        if context.tiers is None:
            raise LoweringError("a semantic stage needs model tiers; run it through semray.pipeline.run")
        return SemanticBatchUDF(
            stage.task,
            stage.operator_key,
            context.tiers,
            context.ledger,
            row_counts=context.row_counts,
            counted_as=stage.operators,
        )
    assert isinstance(stage, BatchSqlStage)
    sql, counts, operators = stage.sql, context.row_counts, stage.operators

    def step(batch: pa.Table) -> pa.Table:
        output = run_sql(batch, sql)
        if counts is not None and operators:
            count_rows(output, counts, operators)
        return output

    return step


def build_union(stage: Stage, context: ExecutionContext) -> rd.Dataset:
    assert isinstance(stage, UnionStage)
    first, *rest = (materialize(child, context) for child in stage.inputs)
    return first.union(*rest)


def _concat(refs: list[Any]) -> pa.Table:
    tables = [table for table in ray.get(refs) if table.num_columns]
    return pa.concat_tables(tables, promote_options="default") if tables else pa.table({})


def collect(stage: Stage, schema: pa.Schema, context: ExecutionContext | None = None) -> pa.Table:
    """Run the pipeline and gather its rows on the driver, typed as ``schema``."""
    _reset_block_size()
    context = with_actor_budget(stage, context or ExecutionContext())
    with reported_failures():
        tables = [table for table in ray.get(materialize(stage, context).to_arrow_refs()) if table.num_rows]
    if not tables:
        return schema.empty_table()
    return pa.concat_tables([table.select(schema.names).cast(schema) for table in tables])


def iter_batches(
    stage: Stage, schema: pa.Schema, batch_rows: int, context: ExecutionContext | None = None
) -> Generator[pa.Table, None, None]:
    """Stream the pipeline's output as Arrow tables of about ``batch_rows`` rows (close it to stop early)."""
    _reset_block_size()
    context = with_actor_budget(stage, context or ExecutionContext())
    batches = materialize(stage, context).iter_batches(batch_size=batch_rows, batch_format="pyarrow")
    try:
        with reported_failures():
            for batch in batches:
                table = cast(pa.Table, batch)  # batch_format="pyarrow"
                if table.num_rows:
                    yield table.select(schema.names).cast(schema)
    finally:
        # Closed here, not when collected: a caller that stops early (a cancelled or budget-stopped
        # run) may keep this frame alive in a traceback, and with it the executor and its actor
        # pools, which then hold the CPUs a resume in the same process needs.
        close = getattr(batches, "close", None)
        if close is not None:
            close()


@contextlib.contextmanager
def reported_failures() -> Iterator[None]:
    """A failed Ray task or actor raises its own error: the first ``SemrayError`` in the cause
    chain, as itself (a ``SourceError`` from a read task, an endpoint's error with its URL and
    status); otherwise an ``ExecutionError`` naming the innermost cause's type and message."""
    try:
        yield
    except RayError as error:
        raise unwrapped(error) from None


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RETRY_NOTE = re.compile(r"\n?Failed to [^\n]* after \d+/\d+ attempts \(total backoff [0-9.]+s\)\.[\s\S]*\Z")
"""What Ray Data appends to the message of a task's last failure (``iterate_with_retry``)."""


class _TaskErrorsAreNotRayBugs(logging.Filter):
    """Ray Data logs a task's own exception (``raise_original_map_exception``) as a bug in Ray,
    with its whole stack: drop that notice and the stack of a task's error, which the caller
    gets as a semray error anyway (see ``unwrapped``). Ray's own failures still log."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Exception occurred in Ray Data or Ray Core internal code"):
            return False
        failed = record.exc_info[1] if record.exc_info else None
        return not (message.startswith("Full stack trace") and isinstance(failed, RayTaskError))


logging.getLogger("ray.data.exceptions").addFilter(_TaskErrorsAreNotRayBugs())


def unwrapped(error: BaseException) -> SemrayError:
    """The error to show for a failure Ray reports (see ``reported_failures``)."""
    innermost = error
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, RayTaskError):
            # A RayTaskError may also be an instance of its cause's class (as_instanceof_cause):
            # its message is Ray's traceback text, so take the cause it carries instead.
            inner = cause.cause
            cause = inner if isinstance(inner, BaseException) else None
            continue
        innermost = cause
        if isinstance(cause, SemrayError):
            return _without_ray_notes(cause)
        cause = getattr(cause, "cause", None) or cause.__cause__ or cause.__context__
    message = _clean(str(innermost))
    if isinstance(innermost, RayTaskError | RayError) and not message:
        message = type(innermost).__name__
    elif isinstance(innermost, RayError):
        # Ray's own error (an actor that died, a lost object): its last line says what happened.
        lines = [line for line in message.splitlines() if line.strip()]
        message = lines[-1] if lines else type(innermost).__name__
    return ExecutionError(f"the pipeline failed: {type(innermost).__name__}: {message}")


def _clean(text: str) -> str:
    return RETRY_NOTE.sub("", ANSI.sub("", text)).strip()


def _without_ray_notes(error: SemrayError) -> SemrayError:
    """``error`` with the retry note Ray Data appended to its message removed (and no ANSI codes)."""
    if error.args and isinstance(error.args[0], str):
        error.args = (_clean(error.args[0]), *error.args[1:])
    elif error.args and isinstance(error.args[-1], str) and RETRY_NOTE.search("\n" + error.args[-1]):
        error.args = error.args[:-1]
    return error


def build_semantic(stage: Stage, context: ExecutionContext) -> rd.Dataset:
    assert isinstance(stage, SemanticStage)
    if context.tiers is None:
        raise LoweringError("a semantic stage needs model tiers; run it through semray.pipeline.run")
    # Blocks of one semantic batch each: every actor gets work, and a LIMIT downstream
    # stops the model calls after a few batches instead of after a whole read block.
    upstream = materialize(stage.inputs[0], context).repartition(target_num_rows_per_block=stage.batch_rows)
    return upstream.map_batches(
        named_udf(SemanticBatchUDF, operator_name(stage.task)),
        fn_constructor_args=(stage.task, stage.operator_key, context.tiers, context.ledger),
        fn_constructor_kwargs={"row_counts": context.row_counts, "counted_as": stage.operators},
        compute=rd.ActorPoolStrategy(min_size=1, max_size=stage.actors, max_tasks_in_flight_per_actor=2),
        batch_size=stage.batch_rows,
        batch_format="pyarrow",
        # Actors wait on model calls, not on CPU: a small share lets them sit beside the
        # Serve replicas on a 2-CPU machine.
        num_cpus=context.actor_cpus,
    )


def build_code(stage: Stage, context: ExecutionContext) -> rd.Dataset:
    """SemCode: an actor pool, each actor feeding batches to its own sandbox process (CPU only)."""
    from semray.pipeline.stages.code import CodeStage
    from semray.pipeline.workers.code_batches import CodeBatchUDF

    assert isinstance(stage, CodeStage)
    upstream = materialize(stage.inputs[0], context)
    return upstream.map_batches(
        CodeBatchUDF,
        fn_constructor_args=(stage,),
        compute=rd.ActorPoolStrategy(min_size=1, max_size=stage.actors),
        batch_size=stage.batch_rows,
        batch_format="pyarrow",
        # The sandbox child does the work; the actor only moves batches over a pipe.
        num_cpus=context.actor_cpus,
    )


BUILDERS: dict[type[Stage], Callable[[Stage, ExecutionContext], rd.Dataset]] = {
    ReadStage: build_read,
    BatchSqlStage: build_batch_sql,
    GatherSqlStage: build_gather_sql,
    BroadcastJoinStage: build_broadcast_join,
    PartitionedSqlStage: build_partitioned_sql,
    JoinStage: build_join,
    SortStage: build_sort,
    LimitStage: build_limit,
    GrowingLimitStage: build_growing_limit,
    UnionStage: build_union,
    SemanticStage: build_semantic,
}


def _register_more_builders() -> None:
    """Cascade and set-level stages live in their own modules, which import this one."""
    from semray.pipeline.cascade import build_cascade
    from semray.pipeline.set_ops import SET_BUILDERS
    from semray.pipeline.stages.code import CodeStage
    from semray.pipeline.stages.semantic import CascadeStage

    BUILDERS.update(SET_BUILDERS)
    BUILDERS[CascadeStage] = build_cascade
    BUILDERS[CodeStage] = build_code


_register_more_builders()
