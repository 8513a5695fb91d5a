"""A cascade's calibration: the sample the large tier labels, and the thresholds it buys.

Over a population of rows with their embedding proxies (sorted by row id, so the draw does not
depend on block order) the calibration sample is drawn with importance weights from the proxy,
the large tier labels it (journaled under the operator's key, so the output reuses those answers
and a resumed run finds them), and ``cost_model/cascade_routes.py`` picks the embedding
thresholds; with the small tier's answers for the rows the embedding tier leaves, its confidence
threshold. The draws, their labels and the route are journaled under ``<key>:calibration``
(``journal_route``). Used over a whole input (``pipeline/ray/cascade.py``) and over the rounds
under a LIMIT (``cascade_rounds.CascadeRounds``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from semray.cost_model import cascade_routes as router
from semray.cost_model.sampling import SampleDesign
from semray.log import get_logger
from semray.operators.schema import ROW_ID
from semray.pipeline.stages.semantic import CascadeStage, SemanticTask
from semray.pipeline.workers.cascade_tiers import answer_keys
from semray.pipeline.workers.semantic_batches import SemanticBatchUDF
from semray.tasks import TaskKind
from semray.transactions import BatchLedger

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Calibration:
    """The embedding stage's route and what bought it: the draws, the rows they are and the large
    tier's answers for those rows (comparable keys, `answer_keys`)."""

    route: router.Route
    design: SampleDesign | None
    sample: list[str]
    large_keys: dict[str, str | None]


def calibrate_embedding(
    stage: CascadeStage,
    target: router.Target,
    large: SemanticBatchUDF,
    ids: list[str],
    proxy: np.ndarray,
    proxy_label: np.ndarray,
    rows_of: Callable[[list[str]], pa.Table],
    seed: int,
) -> Calibration:
    """Draw the calibration sample over the rows ``ids`` (sorted) by their proxies, buy the large
    tier's answers for it (``rows_of`` gives the sampled rows) and choose the embedding thresholds."""
    if not ids:
        return Calibration(router.Route(target), None, [], {})
    task = stage.task
    design = router.draw_calibration(target, proxy, seed=seed)
    sample = [ids[int(i)] for i in design.rows_to_label]
    large_answers = _answer_in_chunks(large, rows_of(sample), stage.batch_rows)
    large_keys = dict(zip(large_answers.column(ROW_ID).to_pylist(), answer_keys(large_answers, task), strict=True))
    of_rows = [large_keys.get(row_id) for row_id in sample]
    large_yes = design.labels_of_draws([1.0 if key == "true" else 0.0 for key in of_rows])
    proxy_keys = [_proxy_key(task, int(proxy_label[int(i)])) for i in design.rows_to_label]
    proxy_correct = design.labels_of_draws(
        [float(a is not None and a == b) for a, b in zip(proxy_keys, of_rows, strict=True)]
    )
    route = router.route_embedding(target, proxy, design, large_yes, proxy_correct)
    if task.kind == TaskKind.FILTER:
        kept = router.selectivity(design, large_yes)
        log.info(
            "cascade_selectivity",
            rows=len(ids),
            estimate=round(kept.value, 4),
            low=round(kept.low, 4),
            high=round(kept.high, 4),
        )
    return Calibration(route, design, sample, large_keys)


def calibrate_small(
    calibration: Calibration,
    ids: list[str],
    proxy: np.ndarray,
    small_confidence: np.ndarray,
    small_keys: list[str | None],
) -> router.Route:
    """The route with the small tier's confidence threshold, from its answers for ``ids``."""
    design = calibration.design
    if design is None:
        return calibration.route
    position = {row_id: index for index, row_id in enumerate(ids)}
    small_of_rows = [small_keys[position[row_id]] for row_id in calibration.sample]
    correct = design.labels_of_draws(
        [
            float(a is not None and a == calibration.large_keys.get(row_id))
            for a, row_id in zip(small_of_rows, calibration.sample, strict=True)
        ]
    )
    return router.route_small(calibration.route, proxy, small_confidence, design, correct)


def cascade_target(stage: CascadeStage) -> router.Target:
    """What the cascade promises (metric, level, confidence, calibration draws)."""
    return router.Target(
        kind=stage.task.kind,  # the plan checks that cascades are filters, classifications or scores
        metric=stage.metric,
        level=stage.level,
        delta=stage.delta,
        labels=stage.labels,
    )


def calibration_seed(stage: CascadeStage) -> int:
    """The calibration draw's seed: fixed by the operator, so a resumed run draws the same rows."""
    return int(stage.operator_key[:8], 16)


def _answer_in_chunks(udf: SemanticBatchUDF, rows: pa.Table, chunk: int) -> pa.Table:
    parts = [udf.answers(rows.slice(start, chunk)) for start in range(0, rows.num_rows, chunk)]
    return pa.concat_tables(parts) if parts else udf.answers_schema().empty_table()


def _proxy_key(task: SemanticTask, label: int) -> str | None:
    return task.choices[label] if task.kind == TaskKind.CLASSIFY and label >= 0 else None


def journal_route(
    stage: CascadeStage,
    ledger: BatchLedger | None,
    route: router.Route,
    ids: list[str],
    proxy: np.ndarray,
    small_confidence: np.ndarray,
    sample: list[str],
    large_keys: dict[str, str | None],
) -> None:
    tiers = route.tiers(proxy, small_confidence) if ids else np.zeros(0, dtype=np.int8)
    if ids:
        position = {row_id: index for index, row_id in enumerate(ids)}
        tiers[[position[row_id] for row_id in sample]] = router.LARGE
    fractions = router.tier_fractions(tiers)
    log.info(
        "cascade_route",
        kind=stage.task.kind,
        rows=len(ids),
        calibration_labels=len(sample),
        fractions={name: round(value, 4) for name, value in fractions.items()},
        route=route.to_json(),
    )
    if ledger is None or not ids:
        return
    table = pa.table(
        {
            ROW_ID: pa.array(sample, pa.string()),
            "large_answer": pa.array([large_keys.get(r) for r in sample], pa.string()),
        }
    ).replace_schema_metadata({"route": json.dumps(route.to_json()), "fractions": json.dumps(fractions)})
    key = stage.operator_key + ":calibration"
    if ledger.committed(key, "route") is None:
        ledger.commit(key, "route", sample, table)
