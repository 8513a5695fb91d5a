"""Ray Data execution of a cascade stage: score, calibrate, route (cost_model/cascade_routes.py decides).

One pass over the stage's input to score it, then a calibration in a task while the routing pass
already starts:

1. every row gets the embedding tier's proxy (similarity to the instruction, or the nearest
   label and its softmax confidence); the result is materialised, because the calibration
   sample is drawn over the whole input. The driver reads the row ids and proxies from those
   blocks (no further pass over the input);
2. a task draws the calibration sample (importance weights from the proxy) and has the large
   tier label it, the sample's batches in flight at once (journaled under the operator's key, so
   the output reuses those answers and a resumed run finds them), then picks the embedding
   thresholds (``workers/cascade_calibration.py``);
3. meanwhile the routing pass starts, two actor pools in a row, so their start-up (processes,
   imports, tier handles) is not on the cascade's critical path: the small tier answers the rows
   the embedding tier does not decide, once the embedding thresholds are known, and the large
   tier the rows nobody cheaper could decide; both tiers work at the same time on different
   batches. Beside it a second task has the small tier answer the drawn rows the embedding tier
   leaves (under ``<key>:small``) and picks the small tier's confidence threshold from those draws
   alone (`route_small` tries a fixed grid, so it needs no other row's answer); the large tier's
   step waits for that threshold (``RouteRef``).

The calibration draws, their labels and the chosen thresholds are journaled under
``<key>:calibration`` (by the second task, once the route is whole); the route is logged as
``cascade_route``. Should the threshold decide nothing, the small tier's answers for the routed
rows were bought in vain, as they were when the small tier answered every row before routing.

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
from semray.transactions import BatchLedger

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
    # Calibration and the small threshold's choice run as tasks, so the routing pass's actor pools
    # start (their processes, imports and tier handles) while the large tier labels the draws; each
    # pool waits for what it needs at its first batch. The block references travel inside a list, so
    # Ray hands them over unresolved.
    calibrated, embedding_route = _calibrate.remote(
        stage, target, large, ids, proxy, proxy_label, [blocks], cascade_calibration.calibration_seed(stage)
    )
    chosen = _choose_route.remote(stage, calibrated, small, proxy, [blocks], ids, context.ledger)
    routed = proxied.map_batches(
        named_udf(cascade_tiers.SmallUDF, f"{name} small tier"),
        fn_constructor_args=(small, RouteRef(embedding_route)),
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
    """A route and its calibration sample that a task is still choosing (``cascade_tiers.RouteToCome``).
    The reference is held inside this value, so Ray passes it to the routing actors unresolved;
    each waits for it at its first batch."""

    ref: Any
    """``ray.ObjectRef`` of a (`router.Route`, sample) pair."""

    def resolve(self) -> tuple[router.Route, frozenset[str]]:
        route, sample = ray.get(self.ref)
        return route, frozenset(sample)


def _calibrate_embedding(
    stage: CascadeStage,
    target: router.Target,
    large: SemanticBatchUDF,
    ids: list[str],
    proxy: np.ndarray,
    proxy_label: np.ndarray,
    blocks: list[Sequence[Any]],
    seed: int,
) -> tuple[cascade_calibration.Calibration, tuple[router.Route, list[str]]]:
    """The calibration of the embedding stage, and the part of it the small tier's pass needs."""
    calibration = cascade_calibration.calibrate_embedding(
        stage, target, large, ids, proxy, proxy_label, lambda sample: _rows(blocks[0], sample), seed
    )
    return calibration, (calibration.route, calibration.sample)


def _choose_small_route(
    stage: CascadeStage,
    calibration: cascade_calibration.Calibration,
    small: SemanticBatchUDF,
    proxy: np.ndarray,
    blocks: list[Sequence[Any]],
    ids: list[str],
    ledger: BatchLedger | None,
) -> tuple[router.Route, list[str]]:
    """The whole route (journaled) and the sample: the small tier's threshold from its answers for
    the drawn rows, when the route has a small stage."""
    if not calibration.route.uses_small or calibration.design is None:
        route = calibration.route
        cascade_calibration.journal_route(stage, ledger, route, ids, proxy, calibration.sample, calibration.large_keys)
    else:
        drawn = _rows(blocks[0], calibration.sample)
        route = cascade_calibration.choose_small_route(stage, calibration, small, proxy, drawn, ids, ledger)
    return route, calibration.sample


# No CPU: they wait on the tiers. Not retried: a retry would ask again what the journal holds.
_calibrate = ray.remote(num_cpus=0, max_retries=0, num_returns=2)(_calibrate_embedding)
_choose_route = ray.remote(num_cpus=0, max_retries=0)(_choose_small_route)


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
