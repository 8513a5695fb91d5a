"""Physical stages -> a Ray Data pipeline: ``materialize`` dispatches each stage to the one builder
of its type (``Builder``; ``relational.py``, ``semantic.py``, ``cascade.py``, ``set_ops.py``,
``limit_rounds.py``), and ``collect`` / ``iter_batches`` run it. ``pipeline/ray/`` holds the only
modules of the pipeline that import ``ray.data``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import pyarrow as pa
import ray
import ray.data as rd

from semray.errors import LoweringError
from semray.pipeline.ray.failures import reported_failures
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.semantic import SemanticStage
from semray.pipeline.workers.row_counts import RowCounts, count_rows, new_execution, take_counts
from semray.serving.deployments import TierHandles
from semray.transactions import BatchLedger

S = TypeVar("S", bound=Stage)


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


@dataclass(frozen=True, slots=True)
class Builder(Generic[S]):
    """How stages of type ``stage`` become Ray Data: ``build`` makes the dataset, calling
    ``materialize`` for the inputs it needs (a LIMIT's round trips skip the chain under it)."""

    stage: type[S]
    build: Callable[[S, ExecutionContext], rd.Dataset]


@functools.cache
def builders() -> dict[type[Stage], Builder[Any]]:
    """Stage type -> its builder. Imported on first use: each builder module imports this one."""
    from semray.pipeline.ray.cascade import CASCADE_BUILDERS
    from semray.pipeline.ray.limit_rounds import LIMIT_ROUND_BUILDERS
    from semray.pipeline.ray.relational import RELATIONAL_BUILDERS
    from semray.pipeline.ray.semantic import SEMANTIC_BUILDERS
    from semray.pipeline.ray.set_ops import SET_BUILDERS

    entries = (*RELATIONAL_BUILDERS, *LIMIT_ROUND_BUILDERS, *SEMANTIC_BUILDERS, *CASCADE_BUILDERS, *SET_BUILDERS)
    return {entry.stage: entry for entry in entries}


def materialize(stage: Stage, context: ExecutionContext | None = None) -> rd.Dataset:
    """Build (lazily) the Ray Data pipeline for a physical plan (``context`` as given by
    ``with_actor_budget`` for the whole plan)."""
    builder = builders().get(type(stage))
    if builder is None:
        raise LoweringError(f"no Ray Data builder for stage {type(stage).__name__}")
    context = context or ExecutionContext()
    dataset = builder.build(stage, context)
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


