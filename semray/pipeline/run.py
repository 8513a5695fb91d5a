"""Running a logical plan: connect, lower, start model tiers and a journaled run when the
plan needs models, build the Ray Data pipeline, deliver rows."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from semray.cluster.connect import connect
from semray.errors import LoweringError
from semray.log import get_logger
from semray.operators.base import Node
from semray.operators.serialize import plan_to_json
from semray.pipeline import materialize
from semray.pipeline.lower import lower
from semray.pipeline.spec import SemanticStage, Stage, render_stages
from semray.serving.config import ServingConfig
from semray.settings import Settings
from semray.transactions import LLMUsage, Run, open_run, show_run

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Result:
    """Rows of a finished query, and what its model calls cost (``run_id`` None: no models)."""

    table: pa.Table
    run_id: str | None = None
    usage: LLMUsage = field(default_factory=LLMUsage)
    simulated: bool = False

    def usage_line(self) -> str:
        if self.run_id is None:
            return "no model calls"
        tag = " (SIMULATED tier: answers come from labels, not a model)" if self.simulated else ""
        return (
            f"model calls: {self.usage.calls}, tokens in/out: {self.usage.tokens_in}/{self.usage.tokens_out}, "
            f"dollars: {self.usage.dollars:.4f}{tag}; run {self.run_id}"
        )


def explain_physical(plan: Node, settings: Settings) -> str:
    try:
        stages = lower(plan, settings)
    except LoweringError as error:
        return f"Physical plan: not available ({error})"
    return "Physical plan (Ray Data)\n" + render_stages(stages)


def execute(plan: Node, settings: Settings, serving: ServingConfig | None = None) -> Result:
    """Run a plan to completion and return its rows with the run's usage."""
    stages = lower(plan, settings)
    connect(settings)
    started = time.perf_counter()
    with _context(plan, stages, settings, serving) as (context, run, simulated):
        table = materialize.collect(stages, plan.output_schema.to_arrow(), context)
    seconds = round(time.perf_counter() - started, 3)
    if run is None:
        log.info("query_finished", rows=table.num_rows, seconds=seconds)
        return Result(table)
    usage = _run_usage(settings, run.run_id)
    log.info("query_finished", rows=table.num_rows, seconds=seconds, run_id=run.run_id, calls=usage.calls, dollars=usage.dollars)
    return Result(table, run.run_id, usage, simulated)


def collect(plan: Node, settings: Settings, serving: ServingConfig | None = None) -> pa.Table:
    return execute(plan, settings, serving).table


def iter_batches(
    plan: Node, settings: Settings, batch_rows: int | None = None, serving: ServingConfig | None = None
) -> Iterator[pa.Table]:
    stages = lower(plan, settings)
    connect(settings)
    with _context(plan, stages, settings, serving) as (context, _, _):
        yield from materialize.iter_batches(stages, plan.output_schema.to_arrow(), batch_rows or settings.batch_size, context)


def write_parquet(plan: Node, settings: Settings, path: Path, serving: ServingConfig | None = None) -> int:
    """Stream results into ``path`` atomically: a temp file in the same folder, then rename."""
    path = path.expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = plan.output_schema.to_arrow()
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    rows = 0
    try:
        with pq.ParquetWriter(temporary, schema) as writer:
            for batch in iter_batches(plan, settings, serving=serving):
                writer.write_table(batch)
                rows += batch.num_rows
        with open(temporary, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    log.info("parquet_written", path=str(path), rows=rows)
    return rows


def model_tiers(stage: Stage) -> set[str]:
    """Tiers the semantic stages of a physical plan call."""
    tiers = {stage.task.tier} if isinstance(stage, SemanticStage) else set()
    for child in stage.inputs:
        tiers |= model_tiers(child)
    return tiers


@contextlib.contextmanager
def _context(
    plan: Node, stages: Stage, settings: Settings, serving: ServingConfig | None
) -> Iterator[tuple[materialize.ExecutionContext, Run | None, bool]]:
    """Tiers and a journaled run for plans that call models; nothing otherwise."""
    tiers = model_tiers(stages)
    if not tiers:
        yield materialize.ExecutionContext(), None, False
        return
    from semray.serving.deployments import start_tiers

    config = serving or ServingConfig()
    simulated = any(config.tier(tier).backend == "simulated" for tier in tiers)
    if simulated:
        log.warning("simulated_model_tier", tiers=sorted(tiers), note="answers come from labels, not a model")
    handles = start_tiers(config, settings, tiers=sorted(tiers))
    physical = render_stages(stages)
    with open_run(settings, plan_to_json(plan, indent=None), output=None, config={"physical_plan": physical}) as run:
        yield materialize.ExecutionContext(tiers=handles, ledger=run.ledger), run, simulated


def _run_usage(settings: Settings, run_id: str) -> LLMUsage:
    total = LLMUsage()
    for operator in show_run(settings, run_id).operators:
        total = total + operator.usage
    return total
