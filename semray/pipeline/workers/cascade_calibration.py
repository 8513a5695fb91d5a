"""A cascade's calibration: the sample the large tier labels, and the thresholds it buys.

Over a population of rows with their embedding proxies (sorted by row id, so the draw does not
depend on block order) the calibration sample is drawn with importance weights from the proxy,
the large tier labels it (journaled under the operator's key, so the output reuses those answers
and a resumed run finds them), and ``cost_model/cascade_routes.py`` picks the embedding
thresholds (`calibrate_embedding`); then the small tier answers the drawn rows the embedding tier
leaves (journaled under ``<key>:small``) and its confidence threshold is chosen from those draws
alone (`calibrate_small`: the thresholds tried are a grid fixed before any row is seen, so no other
row's answer is needed). A sample's batches go to a tier at once (`answer_at_once`), so a
calibration costs about one round trip per tier, not one per batch. The draws, their labels and
the route are journaled under ``<key>:calibration`` (``journal_route``). Used over a whole input
(``pipeline/ray/cascade.py``, where `choose_small_route` runs in a task beside the routing pass)
and over the rounds under a LIMIT (``cascade_rounds.CascadeRounds``, `calibrate`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from semray.cost_model import cascade_routes as router
from semray.cost_model.sampling import SampleDesign
from semray.log import get_logger
from semray.operators.schema import ROW_ID
from semray.pipeline.stages.semantic import CascadeStage, SemanticTask
from semray.pipeline.workers.cascade_tiers import answer_keys
from semray.pipeline.workers.semantic_batches import CONFIDENCE, SemanticBatchUDF
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


def calibrate(
    stage: CascadeStage,
    target: router.Target,
    large: SemanticBatchUDF,
    small: SemanticBatchUDF,
    ids: list[str],
    proxy: np.ndarray,
    proxy_label: np.ndarray,
    rows_of: Callable[[list[str]], pa.Table],
    seed: int,
) -> Calibration:
    """The whole route of the rows ``ids`` (sorted): the embedding thresholds from the large tier's
    labels of an importance-weighted draw, then the small tier's threshold from its answers for
    the drawn rows the embedding tier leaves. Only drawn rows are asked here (``rows_of`` gives
    them): the small tier answers the others while they are routed."""
    calibration = calibrate_embedding(stage, target, large, ids, proxy, proxy_label, rows_of, seed)
    if not calibration.route.uses_small or calibration.design is None:
        return calibration
    route = calibrate_small(stage, calibration, small, proxy, rows_of)
    return dataclasses.replace(calibration, route=route)


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
    large_answers = answer_at_once(large, rows_of(sample), stage.batch_rows)
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
    stage: CascadeStage,
    calibration: Calibration,
    small: SemanticBatchUDF,
    proxy: np.ndarray,
    rows_of: Callable[[list[str]], pa.Table],
) -> router.Route:
    """The route with the small tier's confidence threshold, from its answers for the drawn rows
    the embedding tier does not decide (the others count as correct at this stage)."""
    design = calibration.design
    if design is None:
        return calibration.route
    route = calibration.route
    drawn = design.rows_to_label
    decided = route.embedding_decides(proxy)
    asked = [row_id for row_id, index in zip(calibration.sample, drawn, strict=True) if not decided[int(index)]]
    answers = answer_at_once(small, rows_of(asked), stage.batch_rows) if asked else small.answers_schema().empty_table()
    answered = answers.column(ROW_ID).to_pylist()
    keys = dict(zip(answered, answer_keys(answers, small.task), strict=True))
    confidences = dict(zip(answered, answers.column(CONFIDENCE).to_pylist(), strict=True))
    small_confidence = np.full(proxy.shape[0], router.NOT_ASKED)
    for row_id, index in zip(calibration.sample, drawn, strict=True):
        value = confidences.get(row_id)
        if value is not None and keys.get(row_id) is not None:
            small_confidence[int(index)] = float(value)
    correct = design.labels_of_draws(
        [
            float(keys.get(row_id) is not None and keys.get(row_id) == calibration.large_keys.get(row_id))
            for row_id in calibration.sample
        ]
    )
    return router.route_small(route, proxy, small_confidence, design, correct)


def choose_small_route(
    stage: CascadeStage,
    calibration: Calibration,
    small: SemanticBatchUDF,
    proxy: np.ndarray,
    drawn: pa.Table,
    ids: list[str],
    ledger: BatchLedger | None,
) -> router.Route:
    """The whole route, from the embedding stage's route and the small tier's answers for the drawn
    rows (``drawn``: the sample's rows), journaled. Run in a Ray task beside the routing pass
    (``pipeline/ray/cascade.py``), whose large-tier step waits for it."""

    def rows_of(row_ids: list[str]) -> pa.Table:
        return drawn.filter(pc.is_in(drawn.column(ROW_ID), pa.array(row_ids, pa.string())))

    route = calibrate_small(stage, calibration, small, proxy, rows_of)
    journal_route(stage, ledger, route, ids, proxy, calibration.sample, calibration.large_keys)
    return route


CALIBRATION_CALLS = 8
"""Batches of a calibration sample in flight at once per tier (threads, each with its own ledger
and tier handles); a sample of the default 200 draws is 7 batches of 32 rows."""


def answer_at_once(udf: SemanticBatchUDF, rows: pa.Table, chunk: int, calls: int = CALIBRATION_CALLS) -> pa.Table:
    """``udf.answers`` for ``rows`` in batches of ``chunk`` rows, up to ``calls`` of them in flight
    at once: a calibration sample costs about one round trip of the tier, not one per batch.
    Each batch is journaled as ``udf`` journals it (a resumed run reads it back, paid once)."""
    parts = [rows.slice(start, chunk) for start in range(0, rows.num_rows, chunk)]
    if len(parts) <= 1:
        return udf.answers(rows) if parts else udf.answers_schema().empty_table()
    local = threading.local()

    def answer(part: pa.Table) -> pa.Table:
        own: SemanticBatchUDF | None = getattr(local, "udf", None)
        if own is None:
            # Per thread: a ledger's read cache and a tier's handles are not shared across threads
            # (both copy as they pickle: a fresh cache, handles resolved again).
            own = local.udf = SemanticBatchUDF(udf.task, udf.operator_key, copy.copy(udf.tiers), copy.copy(udf.ledger))
        return own.answers(part)

    with ThreadPoolExecutor(max_workers=min(calls, len(parts)), thread_name_prefix="semray-calibration") as pool:
        answered = list(pool.map(answer, parts))
    return pa.concat_tables(answered)


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


def _proxy_key(task: SemanticTask, label: int) -> str | None:
    return task.choices[label] if task.kind == TaskKind.CLASSIFY and label >= 0 else None


def journal_route(
    stage: CascadeStage,
    ledger: BatchLedger | None,
    route: router.Route,
    ids: list[str],
    proxy: np.ndarray,
    sample: list[str],
    large_keys: dict[str, str | None],
) -> None:
    """Journal the draws, their large-tier answers and the route; log the shares of rows known
    before routing: decided by the embedding tier, drawn (the large tier answered them), and the
    rest, which the small and the large tier share as they are routed."""
    fractions = _fractions_before_routing(route, ids, proxy, sample)
    log.info(
        "cascade_route",
        kind=stage.task.kind,
        rows=len(ids),
        calibration_labels=len(sample),
        fractions=fractions,
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


def _fractions_before_routing(
    route: router.Route, ids: list[str], proxy: np.ndarray, sample: list[str]
) -> dict[str, float]:
    if not ids:
        return {"embedding": 0.0, "drawn": 0.0, "routed": 0.0}
    position = {row_id: index for index, row_id in enumerate(ids)}
    drawn = np.zeros(len(ids), dtype=bool)
    drawn[[position[row_id] for row_id in sample]] = True
    decided = route.embedding_decides(proxy) & ~drawn  # a drawn row takes the large tier's answer
    embedding, drawn_share = float(decided.mean()), float(drawn.mean())
    return {
        "embedding": round(embedding, 4),
        "drawn": round(drawn_share, 4),
        "routed": round(1.0 - embedding - drawn_share, 4),
    }
