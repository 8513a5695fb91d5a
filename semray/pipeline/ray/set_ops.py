"""Ray Data builders of the set-level semantic stages.

Embedding is an actor pool beside the pipeline (``EmbedStage``); a blocked join streams its
left side against the gathered right side; top-k, aggregation and search gather their input
and run in one Ray task that calls the tiers (their work is sequential rounds of batched calls).
"""

from __future__ import annotations

import functools
import shutil
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import ray
import ray.data as rd

from semray.errors import LoweringError
from semray.log import get_logger
from semray.pipeline.ray.failures import reported_failures
from semray.pipeline.ray.materialize import Builder, ExecutionContext, materialize
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.set_ops import AggStage, BlockStage, CatalogSearchStage, EmbedStage, SearchStage, TopKStage
from semray.pipeline.workers.aggregate import aggregate_rows
from semray.pipeline.workers.batch_sql import empty_table
from semray.pipeline.workers.blocking import candidate_pairs
from semray.pipeline.workers.embed_batches import EmbedBatchUDF
from semray.pipeline.workers.metering import named_udf, operator_name
from semray.pipeline.workers.row_counts import count_rows
from semray.pipeline.workers.search import search_rows
from semray.pipeline.workers.top_k import Ranks, rank_rows
from semray.serving.deployments import TierHandles
from semray.transactions import BatchLedger

log = get_logger(__name__)
TASK_CPUS = 0.25
"""The gathered set operators wait on model calls, not on CPU."""


def _tiers(context: ExecutionContext, stage: Stage) -> TierHandles:
    if context.tiers is None:
        raise LoweringError(f"{type(stage).__name__} needs model tiers; run it through semray.pipeline.runs.execute")
    return context.tiers


def _gather(stage: Stage, columns: tuple[tuple[str, str], ...], context: ExecutionContext) -> Any:
    """Run the upstream pipeline and concatenate its rows in one task; an ObjectRef of a table."""
    with reported_failures():
        refs = materialize(stage, context).to_arrow_refs()
    return _concat.remote(columns, *refs)


@ray.remote(num_cpus=TASK_CPUS)
def _concat(columns: tuple[tuple[str, str], ...], *tables: pa.Table) -> pa.Table:
    names = [name for name, _ in columns]
    parts = [table.select(names) for table in tables if table.num_rows]
    if not parts:
        return empty_table(columns)
    return pa.concat_tables(parts, promote_options="default")


def build_embed(stage: EmbedStage, context: ExecutionContext) -> rd.Dataset:
    upstream = materialize(stage.inputs[0], context)
    return upstream.map_batches(
        named_udf(EmbedBatchUDF, operator_name(stage.task, "Embed")),
        fn_constructor_args=(
            stage.task.instruction,
            _tiers(context, stage),
            stage.operator_key if stage.journaled else None,
            context.ledger if stage.journaled else None,
        ),
        compute=rd.ActorPoolStrategy(min_size=1, max_size=stage.actors),
        batch_size=stage.batch_rows,
        batch_format="pyarrow",
        num_cpus=context.actor_cpus,
    )


def build_block(stage: BlockStage, context: ExecutionContext) -> rd.Dataset:
    if len(stage.inputs) == 1:  # one relation on both sides: run (and embed) it once
        with reported_failures():
            relation = materialize(stage.inputs[0], context).materialize()
        right_table = _concat.remote(stage.right_columns, *relation.to_arrow_refs())
        left_rows: rd.Dataset = relation
    else:
        left, right = stage.inputs
        right_table = _gather(right, stage.right_columns, context)
        left_rows = materialize(left, context)
    return left_rows.map_batches(
        functools.partial(_block_batch, right=right_table, stage=stage),
        batch_format="pyarrow",
        batch_size=None,
        num_cpus=0.5,
    )


def _block_batch(batch: pa.Table, right: Any, stage: BlockStage) -> pa.Table:
    table = ray.get(right) if isinstance(right, ray.ObjectRef) else right
    return candidate_pairs(batch, table, stage)


@ray.remote(num_cpus=TASK_CPUS)
def _rank(table: pa.Table, stage: TopKStage, tiers: TierHandles, ledger: BatchLedger | None) -> pa.Table:
    outcome = rank_rows(table, stage, tiers, ledger)
    log.info(
        "sem_topk_ranked",
        k=stage.k,
        rows=table.num_rows,
        candidates=outcome.candidates,
        comparisons=outcome.comparisons,
    )
    return outcome.table


@ray.remote(num_cpus=TASK_CPUS)
def _aggregate(table: pa.Table, stage: AggStage, tiers: TierHandles, ledger: BatchLedger | None) -> pa.Table:
    return aggregate_rows(table, stage, tiers, ledger)


@ray.remote(num_cpus=TASK_CPUS)
def _search(table: pa.Table, stage: SearchStage, tiers: TierHandles | None, ledger: BatchLedger | None) -> pa.Table:
    if ledger is not None:
        return search_rows(table, stage, tiers, ledger.run_dir / "indexes" / stage.operator_key, ledger=ledger)
    # No run (full-text search alone calls no model): a folder of its own, removed afterwards.
    folder = stage.index_root / f"{stage.operator_key}-{uuid.uuid4().hex[:8]}"
    try:
        return search_rows(table, stage, tiers, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def build_topk(stage: TopKStage, context: ExecutionContext) -> rd.Dataset:
    table = _gather(stage.inputs[0], stage.input_columns, context)
    result = _rank.remote(table, stage, _tiers(context, stage), context.ledger)
    return rd.from_arrow_refs([result])  # type: ignore[list-item]


def ranks_in_rounds(stage: TopKStage, context: ExecutionContext, first_rows: int, growth: int) -> Iterator[pa.Table]:
    """A top-k's ranked rows, best first, ranked as a LIMIT's rounds draw them (on the driver):
    ``first_rows`` ranks, then ``growth`` times as many each time (``workers/top_k.Ranks``), so a
    chain above that stops early leaves the later ranks unsorted. The input is embedded and
    gathered whole first (the prefilter needs every row's vector)."""
    table = ray.get(_gather(stage.inputs[0], stage.input_columns, context))
    ranks = Ranks(table, stage, _tiers(context, stage), context.ledger)
    size = max(1, first_rows)
    while True:
        chunk = ranks.next(size)
        if not chunk.num_rows:
            log.info("sem_topk_ranked", k=stage.k, ranks=ranks.given, comparisons=ranks.asked, in_rounds=True)
            return
        if context.row_counts is not None and stage.operators:
            count_rows(chunk, context.row_counts, stage.operators)
        yield chunk
        size *= growth


def build_agg(stage: AggStage, context: ExecutionContext) -> rd.Dataset:
    table = _gather(stage.inputs[0], stage.input_columns, context)
    result = _aggregate.remote(table, stage, _tiers(context, stage), context.ledger)
    return rd.from_arrow_refs([result])  # type: ignore[list-item]


def build_search(stage: SearchStage, context: ExecutionContext) -> rd.Dataset:
    table = _gather(stage.inputs[0], stage.input_columns, context)
    result = _search.remote(table, stage, context.tiers, context.ledger)
    return rd.from_arrow_refs([result])  # type: ignore[list-item]


SET_BUILDERS = (
    Builder(EmbedStage, build_embed),
    Builder(BlockStage, build_block),
    Builder(TopKStage, build_topk),
    Builder(AggStage, build_agg),
    Builder(SearchStage, build_search),
    Builder(CatalogSearchStage, build_search),
)
