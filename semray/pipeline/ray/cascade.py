"""Ray Data execution of a cascade stage: score, calibrate, route (cost_model/cascade_routes.py decides).

One pass over the stage's input to score it, then a calibration in a task while the routing pass
already runs:

1. every row gets the embedding tier's proxy (similarity to the instruction, or the nearest
   label and its softmax confidence); the result is materialised, because the calibration
   sample is drawn over the whole input. The driver reads the row ids and proxies from those
   blocks (no further pass over the input);
2. a task draws the calibration sample (importance weights from the proxy) and has the large
   tier label it while the small tier answers the same rows, each sample's batches in flight at
   once (journaled under the operator's key and ``<key>:small``, so the output reuses those answers
   and a resumed run finds them); it picks the embedding thresholds from the labels and the small
   tier's confidence threshold from its answers for the draws alone (`route_small` tries a fixed
   grid, so it needs no other row's answer) (``workers/cascade_calibration.py``);
3. meanwhile a streaming pass of two actor pools in a row: the small tier answers every row not
   drawn (the driver draws the same rows with the same seed), so its work and the pools' start-up
   (processes, imports, tier handles) overlap the calibration; the large tier's step waits for the
   route (``RouteRef``) and answers the rows nobody cheaper could decide, both tiers working at the
   same time on different batches. The small tier's answers for rows the embedding tier decides are
   bought in vain: cheap next to waiting for the embedding thresholds.

The calibration draws, their labels and the chosen thresholds are journaled under
``<key>:calibration``; the route is logged as ``cascade_route``.

Under a LIMIT that needs more rows than the calibration labels, ``CascadeRounds`` does the same on
the driver, one round of rows at a time: it calibrates on the first round and routes the later
ones row by row, so the small and large tiers see little more than the rows the LIMIT needs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray
import ray.data as rd

from semray.cost_model import cascade_routes as router
from semray.errors import LoweringError
from semray.log import get_logger
from semray.operators.schema import ROW_ID
from semray.pipeline.ray.materialize import Builder, ExecutionContext, materialize
from semray.pipeline.stages.semantic import CascadeStage
from semray.pipeline.workers import cascade_calibration, cascade_tiers
from semray.pipeline.workers.cascade_rounds import CascadeRounds
from semray.pipeline.workers.metering import named_udf, operator_name
from semray.pipeline.workers.semantic_batches import SemanticBatchUDF
from semray.tasks import TaskKind

log = get_logger(__name__)


def build_cascade(stage: CascadeStage, context: ExecutionContext) -> rd.Dataset:
    if context.tiers is None:
        raise LoweringError("a cascade needs model tiers; run it through semray.pipeline.runs.execute")
    tiers = context.tiers
    task = stage.task
    target = cascade_calibration.cascade_target(stage)
    started = time.monotonic()  # the proxy pass's time goes to the log: what a cascade waits on first
    upstream = materialize(stage.inputs[0], context).repartition(target_num_rows_per_block=stage.batch_rows)
    pool = _pool(stage, context)
    name = operator_name(task)  # its passes on the dashboard: "SemFilter[...] embedding proxy", ...
    instruction = tiers.embed([router.instruction_text(task.instruction)])[0]
    labels = tiers.embed(list(task.choices)) if task.kind == TaskKind.CLASSIFY else None
    proxied = upstream.map_batches(
        named_udf(cascade_tiers.ProxyUDF, f"{name} embedding proxy"),
        fn_constructor_args=(task, tiers, instruction, labels),
        # Each batch's proxies journaled and counted in Result.usage (a resume embeds no row again).
        fn_constructor_kwargs={
            "operator_key": stage.operator_key + cascade_tiers.EMBEDDING_SUFFIX,
            "ledger": context.ledger,
        },
        **pool,
    ).materialize()

    blocks = proxied.to_arrow_refs()  # the materialised blocks themselves: reading them is no new pass
    log.info("cascade_proxies", operator=name, rows=proxied.count(), seconds=round(time.monotonic() - started, 2))

    large = SemanticBatchUDF(cascade_tiers.on_tier(task, "large"), stage.operator_key, tiers, context.ledger)
    small = SemanticBatchUDF(cascade_tiers.on_tier(task, "small"), stage.operator_key + ":small", tiers, context.ledger)
    ids, proxy, proxy_label = _proxy_columns(blocks)
    seed = cascade_calibration.calibration_seed(stage)
    # The calibration runs in a task while the routing pass starts: its actor pools start up (their
    # processes, imports, tier handles) and the small tier answers every row the calibration did not
    # draw while the large tier labels the draws; the large tier's step waits for the route. The
    # draw is made here too (the same seed: the same rows), so the small tier knows which rows it
    # need not ask.
    _, sample = cascade_calibration.draw(target, ids, proxy, seed)
    rows_of = BlockRows(tuple(blocks))
    chosen = _calibrate.remote(stage, target, large, small, ids, proxy, proxy_label, rows_of, seed, context.ledger)
    routed = proxied
    if router.Route(target).uses_small:
        routed = proxied.map_batches(
            named_udf(cascade_tiers.SmallUDF, f"{name} small tier"),
            fn_constructor_args=(small, router.Route(target), frozenset(sample)),
            **pool,
        )
    final: rd.Dataset = routed.map_batches(
        named_udf(cascade_tiers.FinalUDF, f"{name} route"),
        fn_constructor_args=(large, RouteRef(chosen)),
        **pool,
    )
    return final


@dataclass(frozen=True, slots=True)
class RouteRef:
    """The route and calibration sample a task is still choosing (``cascade_tiers.RouteToCome``).
    The reference is held inside this value, so Ray passes it to the routing actors unresolved;
    each waits for it at its first batch."""

    ref: Any
    """``ray.ObjectRef`` of the task's `cascade_calibration.Calibration`."""

    def resolve(self) -> tuple[router.Route, frozenset[str]]:
        calibration: cascade_calibration.Calibration = ray.get(self.ref)
        return calibration.route, frozenset(calibration.sample)


@dataclass(frozen=True, slots=True)
class BlockRows:
    """Rows by id from the proxy pass's materialised blocks (a calibration sample: a few hundred
    rows). The block references are held inside this value, so Ray hands them to the calibration
    task unresolved."""

    blocks: tuple[Any, ...]

    def __call__(self, row_ids: list[str]) -> pa.Table:
        return _rows(self.blocks, row_ids)


# No CPU: it waits on the tiers. Not retried: a retry would ask again what the journal holds.
_calibrate = ray.remote(num_cpus=0, max_retries=0)(cascade_calibration.calibrate)


def _pool(stage: CascadeStage, context: ExecutionContext) -> dict[str, Any]:
    return {
        "compute": rd.ActorPoolStrategy(min_size=1, max_size=stage.actors, max_tasks_in_flight_per_actor=2),
        "batch_size": stage.batch_rows,
        "batch_format": "pyarrow",
        "num_cpus": context.actor_cpus,
    }


def _proxy_columns(blocks: Sequence[Any]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Row ids (sorted, so the calibration draw does not depend on block order), proxy, proxy label,
    read block by block from the proxy pass's materialised output."""
    columns = [ROW_ID, cascade_tiers.PROXY, cascade_tiers.PROXY_LABEL]
    parts = [table for table in (ray.get(ref).select(columns) for ref in blocks) if table.num_rows]
    if not parts:
        return [], np.zeros(0), np.zeros(0, dtype=np.int64)
    table = pa.concat_tables(parts).sort_by(ROW_ID)
    return (
        [str(value) for value in table.column(ROW_ID).to_pylist()],
        table.column(cascade_tiers.PROXY).to_numpy().astype(np.float64),
        table.column(cascade_tiers.PROXY_LABEL).to_numpy().astype(np.int64),
    )


def _rows(blocks: Sequence[Any], row_ids: list[str]) -> pa.Table:
    """The rows ``row_ids`` of the materialised blocks (a calibration sample: a few hundred rows)."""
    wanted = pa.array(row_ids, pa.string())
    parts = [table.filter(pc.is_in(table.column(ROW_ID), wanted)) for table in (ray.get(ref) for ref in blocks)]
    parts = [part for part in parts if part.num_rows]
    return pa.concat_tables(parts) if parts else pa.table({})


def cascade_rounds(stage: CascadeStage, context: ExecutionContext) -> CascadeRounds:
    """A cascade stage as a step of the round trips under a LIMIT (``GrowingLimitStage``)."""
    if context.tiers is None:
        raise LoweringError("a cascade needs model tiers; run it through semray.pipeline.runs.execute")
    return CascadeRounds(
        stage, context.tiers, context.ledger, row_counts=context.row_counts, counted_as=stage.operators
    )


CASCADE_BUILDERS = (Builder(CascadeStage, build_cascade),)
