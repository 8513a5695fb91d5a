"""Ray Data builders of the relational stages: reads, per-batch SQL, gathers, hash shuffles,
joins, sorts, limits and unions (``stages/relational.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import ray
import ray.data as rd
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from semray.errors import SourceError
from semray.pipeline.ray.failures import reported_failures
from semray.pipeline.ray.materialize import TASK_CPUS, Builder, ExecutionContext, materialize
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.relational import (
    PARTITION,
    BatchSqlStage,
    BroadcastJoinStage,
    GatherSqlStage,
    JoinStage,
    LimitStage,
    PartitionedSqlStage,
    ReadStage,
    SelfJoinStage,
    SortStage,
    UnionStage,
)
from semray.pipeline.workers.batch_sql import empty_table, run_sql
from semray.sources import open_source


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


def build_read(stage: ReadStage, context: ExecutionContext) -> rd.Dataset:
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


def build_batch_sql(stage: BatchSqlStage, context: ExecutionContext) -> rd.Dataset:
    upstream = materialize(stage.inputs[0], context)
    return upstream.map_batches(
        run_sql,  # type: ignore[arg-type]
        fn_args=(stage.sql,),
        batch_format="pyarrow",
        batch_size=None,
        zero_copy_batch=True,
        num_cpus=TASK_CPUS,
    )


def build_gather_sql(stage: GatherSqlStage, context: ExecutionContext) -> rd.Dataset:
    return rd.from_arrow_refs([gathered(stage.inputs[0], stage.input_columns, context, stage.sql)])


def gathered(
    stage: Stage, columns: tuple[tuple[str, str], ...], context: ExecutionContext, sql: str = "SELECT * FROM batch"
) -> Any:
    """Run the upstream pipeline, then ``sql`` over all its rows in one task; an ObjectRef."""
    with reported_failures():
        refs = materialize(stage, context).to_arrow_refs()
    return _run_on_all.remote(sql, columns, *refs)


def build_broadcast_join(stage: BroadcastJoinStage, context: ExecutionContext) -> rd.Dataset:
    left, right = stage.inputs
    right_table = gathered(right, stage.right_columns, context)
    return materialize(left, context).map_batches(
        _join_batch,  # type: ignore[arg-type]
        fn_args=(right_table, stage.sql),
        batch_format="pyarrow",
        batch_size=None,
        zero_copy_batch=True,
        num_cpus=TASK_CPUS,
    )


def build_self_join(stage: SelfJoinStage, context: ExecutionContext) -> rd.Dataset:
    """The relation's answered rows computed once (the model asked once per row), then streamed
    as the left side against all of them gathered."""
    with reported_failures():
        refs = materialize(stage.inputs[0], context).to_arrow_refs()
    everything = _run_on_all.remote("SELECT * FROM batch", stage.right_columns, *refs)
    # No rows: the gathered empty table (typed) as the one left block, so the output keeps its columns.
    return rd.from_arrow_refs(refs or [everything]).map_batches(
        _join_batch,  # type: ignore[arg-type]
        fn_args=(everything, stage.sql),
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


def build_partitioned_sql(stage: PartitionedSqlStage, context: ExecutionContext) -> rd.Dataset:
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


def build_join(stage: JoinStage, context: ExecutionContext) -> rd.Dataset:
    left, right = (materialize(child, context) for child in stage.inputs)
    return left.join(
        right,
        join_type=stage.kind,
        num_partitions=stage.num_partitions,
        on=stage.left_keys,  # type: ignore[arg-type]  # the stub says tuple[str], any length works
        right_on=stage.right_keys,  # type: ignore[arg-type]
    )


def build_sort(stage: SortStage, context: ExecutionContext) -> rd.Dataset:
    return materialize(stage.inputs[0], context).sort(list(stage.columns), descending=list(stage.descending))


def build_limit(stage: LimitStage, context: ExecutionContext) -> rd.Dataset:
    upstream = materialize(stage.inputs[0], context).limit(stage.count + stage.offset)
    if not stage.offset:
        return upstream
    # Ray Data has no OFFSET: keep the first offset+count rows (in order) and slice.
    table = _concat(upstream.to_arrow_refs())
    return rd.from_arrow(table.slice(stage.offset, stage.count))


def build_union(stage: UnionStage, context: ExecutionContext) -> rd.Dataset:
    first, *rest = (materialize(child, context) for child in stage.inputs)
    return first.union(*rest)


def _concat(refs: list[Any]) -> pa.Table:
    tables = [table for table in ray.get(refs) if table.num_columns]
    return pa.concat_tables(tables, promote_options="default") if tables else pa.table({})


RELATIONAL_BUILDERS = (
    Builder(ReadStage, build_read),
    Builder(BatchSqlStage, build_batch_sql),
    Builder(GatherSqlStage, build_gather_sql),
    Builder(BroadcastJoinStage, build_broadcast_join),
    Builder(SelfJoinStage, build_self_join),
    Builder(PartitionedSqlStage, build_partitioned_sql),
    Builder(JoinStage, build_join),
    Builder(SortStage, build_sort),
    Builder(LimitStage, build_limit),
    Builder(UnionStage, build_union),
)
