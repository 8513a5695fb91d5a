"""Ray Data builder of a LIMIT over a chain of semantic steps (``GrowingLimitStage``): the chain's
stages become steps the driver runs in round trips (``workers/limit_rounds.limited_rows``) over the
stream of what lies under the chain, which stops once the rounds are done. A factorized join in the
chain (``BroadcastJoinStage.left_rounds``) is a step too: its right side (each right row asked once)
is gathered at its first round, and each round of left rows is asked, then joined to it. A factorized
self-join (``SelfJoinStage``) is a step over the rows its one question answered: each round joins
with the rounds before it, so a LIMIT asks only the rows its first pairs need. A top-k right under the
chain is ranked as the rounds draw its rows (``set_ops.ranks_in_rounds``): only the ranks the chain
reads are sorted."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa
import ray
import ray.data as rd

from semray.errors import LoweringError
from semray.pipeline.ray.cascade import cascade_rounds
from semray.pipeline.ray.failures import reported_failures
from semray.pipeline.ray.materialize import Builder, ExecutionContext, materialize
from semray.pipeline.ray.relational import gathered
from semray.pipeline.ray.set_ops import ranks_in_rounds
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.relational import BatchSqlStage, BroadcastJoinStage, GrowingLimitStage, SelfJoinStage
from semray.pipeline.stages.semantic import CascadeStage, SemanticStage, in_rounds
from semray.pipeline.stages.set_ops import TopKStage
from semray.pipeline.workers.batch_sql import run_sql
from semray.pipeline.workers.limit_rounds import limited_rows
from semray.pipeline.workers.row_counts import count_rows
from semray.pipeline.workers.semantic_batches import SemanticBatchUDF


def build_growing_limit(stage: GrowingLimitStage, context: ExecutionContext) -> rd.Dataset:
    """Run the semantic chain under the LIMIT on the driver in growing round trips (see
    ``workers/limit_rounds.py``); what lies under the chain streams, and stops once the rounds are done."""
    steps: list[Callable[[pa.Table], pa.Table]] = []
    below = stage.inputs[0]
    while in_rounds(below):
        steps.append(_driver_step(below, context))
        below = below.inputs[0]
    steps.reverse()
    wanted = stage.count + stage.offset
    with reported_failures():
        if type(below) is TopKStage:  # ranked as the rounds draw: ranks nobody reads stay unsorted
            batches: Iterable[Any] = ranks_in_rounds(below, context, stage.first_rows, stage.growth)
        else:
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
        return cascade_rounds(stage, context)
    if isinstance(stage, SemanticStage):
        if context.tiers is None:
            raise LoweringError("a semantic stage needs model tiers; run it through semray.pipeline.runs.execute")
        return SemanticBatchUDF(
            stage.task,
            stage.operator_key,
            context.tiers,
            context.ledger,
            row_counts=context.row_counts,
            counted_as=stage.operators,
        )
    if type(stage) is BroadcastJoinStage:
        return _join_step(stage, context)
    if type(stage) is SelfJoinStage:
        return _self_join_step(stage, context)
    if not isinstance(stage, BatchSqlStage):
        raise LoweringError(f"{type(stage).__name__} cannot run in a LIMIT's round trips (stages.semantic.in_rounds)")
    sql, counts, operators = stage.sql, context.row_counts, stage.operators

    def step(batch: pa.Table) -> pa.Table:
        output = run_sql(batch, sql)
        if counts is not None and operators:
            count_rows(output, counts, operators)
        return output

    return step


def _join_step(stage: BroadcastJoinStage, context: ExecutionContext) -> Callable[[pa.Table], pa.Table]:
    """A factorized join as a step over its left rows: the right side (its own pipeline, each row
    asked once on the actor pool) is gathered at the first round that reaches the join, so a LIMIT
    whose rounds end before any left row passed asks none of it."""
    right: list[pa.Table] = []
    counts, operators = context.row_counts, stage.operators

    def step(batch: pa.Table) -> pa.Table:
        if not right:
            right.append(ray.get(gathered(stage.inputs[1], stage.right_columns, context)))
        output = run_sql(batch, stage.sql, right_side=right[0])
        if counts is not None and operators:
            count_rows(output, counts, operators)
        return output

    return step


def _self_join_step(stage: SelfJoinStage, context: ExecutionContext) -> Callable[[pa.Table], pa.Table]:
    """A factorized self-join as a step over its answered rows: each round's rows join with every
    row answered so far (themselves included), and the rows of earlier rounds with the new ones,
    so after r rows every pair among them was produced exactly once and nothing is asked twice."""
    seen: list[pa.Table] = []
    counts, operators = context.row_counts, stage.operators

    def step(batch: pa.Table) -> pa.Table:
        earlier = pa.concat_tables(seen, promote_options="default") if seen else None
        seen.append(batch)
        everything = pa.concat_tables(seen, promote_options="default")
        parts = [run_sql(batch, stage.sql, right_side=everything)]
        if earlier is not None and earlier.num_rows:
            parts.append(run_sql(earlier, stage.sql, right_side=batch))
        output = pa.concat_tables(parts, promote_options="default")
        if counts is not None and operators:
            count_rows(output, counts, operators)
        return output

    return step


LIMIT_ROUND_BUILDERS = (Builder(GrowingLimitStage, build_growing_limit),)
