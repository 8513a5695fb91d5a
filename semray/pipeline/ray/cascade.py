"""Ray Data execution of a cascade stage: score, calibrate, route (cost_model/cascade_routes.py decides).

Three passes over the stage's input, each an actor pool:

1. every row gets the embedding tier's proxy (similarity to the instruction, or the nearest
   label and its softmax confidence); the result is materialised, because thresholds need
   the whole input;
2. the driver draws the calibration sample over all rows (importance weights from the
   proxy), has the large tier label it (journaled under the operator's key, so the output
   reuses those answers and a resumed run finds them), and picks the embedding thresholds;
   the small tier then answers the rows the embedding tier leaves (journaled under
   ``<key>:small``), and the driver picks the small tier's confidence threshold;
3. each row takes the answer of the tier that decides it; the large tier is asked only for
   the rows nobody cheaper could decide.

The calibration draws, their labels and the chosen thresholds are journaled under
``<key>:calibration``; the route is logged as ``cascade_route``.

Under a LIMIT that needs more rows than the calibration labels, ``CascadeRounds`` does the same on
the driver, one round of rows at a time: it calibrates on the first round and routes the later
ones row by row, so the small and large tiers see little more than the rows the LIMIT needs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray
import ray.data as rd

from semray.cost_model import cascade_routes as router
from semray.errors import LoweringError
from semray.operators.schema import ROW_ID
from semray.pipeline.ray.materialize import Builder, ExecutionContext, materialize
from semray.pipeline.stages.semantic import CascadeStage
from semray.pipeline.workers import cascade_calibration, cascade_tiers
from semray.pipeline.workers.cascade_rounds import CascadeRounds
from semray.pipeline.workers.metering import named_udf, operator_name
from semray.pipeline.workers.semantic_batches import SemanticBatchUDF
from semray.tasks import TaskKind


def build_cascade(stage: CascadeStage, context: ExecutionContext) -> rd.Dataset:
    if context.tiers is None:
        raise LoweringError("a cascade needs model tiers; run it through semray.pipeline.runs.execute")
    tiers = context.tiers
    task = stage.task
    target = cascade_calibration.cascade_target(stage)
    upstream = materialize(stage.inputs[0], context).repartition(target_num_rows_per_block=stage.batch_rows)
    pool = _pool(stage, context)
    name = operator_name(task)  # its passes on the dashboard: "SemFilter[...] embedding proxy", ...
    instruction = tiers.embed([router.instruction_text(task.instruction)])[0]
    labels = tiers.embed(list(task.choices)) if task.kind == TaskKind.CLASSIFY else None
    proxied = upstream.map_batches(
        named_udf(cascade_tiers.ProxyUDF, f"{name} embedding proxy"),
        fn_constructor_args=(task, tiers, instruction, labels),
        **pool,
    ).materialize()

    large = SemanticBatchUDF(cascade_tiers.on_tier(task, "large"), stage.operator_key, tiers, context.ledger)
    ids, proxy, proxy_label = _proxy_columns(proxied)
    seed = cascade_calibration.calibration_seed(stage)
    calibration = cascade_calibration.calibrate_embedding(
        stage, target, large, ids, proxy, proxy_label, lambda sample: _rows(proxied, sample), seed
    )
    route, sample, large_keys = calibration.route, calibration.sample, calibration.large_keys

    with_small = proxied
    small_confidence = np.full(len(ids), router.NOT_ASKED)
    if route.uses_small and ids:
        small_task = cascade_tiers.on_tier(task, "small")
        small = SemanticBatchUDF(small_task, stage.operator_key + ":small", tiers, context.ledger)
        with_small = proxied.map_batches(
            named_udf(cascade_tiers.SmallUDF, f"{name} small tier"), fn_constructor_args=(small, route), **pool
        ).materialize()
        small_ids, small_confidence, small_keys = _small_columns(with_small)
        assert small_ids == ids, "the cascade's passes must see the same rows"
        route = cascade_calibration.calibrate_small(calibration, ids, proxy, small_confidence, small_keys)

    cascade_calibration.journal_route(stage, context.ledger, route, ids, proxy, small_confidence, sample, large_keys)
    final: rd.Dataset = with_small.map_batches(
        named_udf(cascade_tiers.FinalUDF, f"{name} route"),
        fn_constructor_args=(large, route, frozenset(sample)),
        **pool,
    )
    return final


def _pool(stage: CascadeStage, context: ExecutionContext) -> dict[str, Any]:
    return {
        "compute": rd.ActorPoolStrategy(min_size=1, max_size=stage.actors, max_tasks_in_flight_per_actor=2),
        "batch_size": stage.batch_rows,
        "batch_format": "pyarrow",
        "num_cpus": context.actor_cpus,
    }


def _collect(dataset: rd.Dataset) -> pa.Table:
    tables = [table for table in ray.get(dataset.to_arrow_refs()) if table.num_rows]
    return pa.concat_tables(tables) if tables else pa.table({})


def _proxy_columns(proxied: rd.Dataset) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Row ids (sorted, so the calibration draw does not depend on block order), proxy, proxy label."""
    table = _collect(proxied.select_columns([ROW_ID, cascade_tiers.PROXY, cascade_tiers.PROXY_LABEL]))
    if not table.num_rows:
        return [], np.zeros(0), np.zeros(0, dtype=np.int64)
    table = table.sort_by(ROW_ID)
    return (
        [str(value) for value in table.column(ROW_ID).to_pylist()],
        table.column(cascade_tiers.PROXY).to_numpy().astype(np.float64),
        table.column(cascade_tiers.PROXY_LABEL).to_numpy().astype(np.int64),
    )


def _small_columns(dataset: rd.Dataset) -> tuple[list[str], np.ndarray, list[str | None]]:
    confidence_column, key_column = cascade_tiers.SMALL_CONFIDENCE, cascade_tiers.SMALL_KEY
    table = _collect(dataset.select_columns([ROW_ID, confidence_column, key_column])).sort_by(ROW_ID)
    confidence = table.column(confidence_column).fill_null(router.NOT_ASKED).to_numpy().astype(np.float64)
    return [str(value) for value in table.column(ROW_ID).to_pylist()], confidence, table.column(key_column).to_pylist()


def _rows(dataset: rd.Dataset, row_ids: list[str]) -> pa.Table:
    wanted = pa.array(row_ids, pa.string())

    def keep(batch: pa.Table) -> pa.Table:
        return batch.filter(pc.is_in(batch.column(ROW_ID), wanted))

    return _collect(dataset.map_batches(keep, batch_format="pyarrow"))


def cascade_rounds(stage: CascadeStage, context: ExecutionContext) -> CascadeRounds:
    """A cascade stage as a step of the round trips under a LIMIT (``GrowingLimitStage``)."""
    if context.tiers is None:
        raise LoweringError("a cascade needs model tiers; run it through semray.pipeline.runs.execute")
    return CascadeRounds(
        stage, context.tiers, context.ledger, row_counts=context.row_counts, counted_as=stage.operators
    )


CASCADE_BUILDERS = (Builder(CascadeStage, build_cascade),)
