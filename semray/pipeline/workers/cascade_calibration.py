"""A cascade's calibration: the sample the large tier labels, and the thresholds it buys.

Over a population of rows with their embedding proxies (sorted by row id, so the draw does not
depend on block order) the calibration sample is drawn with importance weights from the proxy
(`draw`); the large tier labels it (journaled under the operator's key, so the output reuses those
answers and a resumed run finds them) while the small tier answers the same rows (journaled under
``<key>:small``); ``cost_model/cascade_routes.py`` picks the embedding thresholds from the labels
and the small tier's confidence threshold from its answers for the drawn rows the embedding tier
leaves (the thresholds tried are a grid fixed before any row is seen, so no other row's answer is
needed). A sample's batches go to a tier at once (`answer_at_once`), so a calibration costs about
one round trip per tier, not one per batch. The draws, their labels and the route are journaled
under ``<key>:calibration`` (``journal_route``). Used over a whole input (``pipeline/ray/cascade.py``,
in a task beside the routing pass) and over the rounds under a LIMIT (``cascade_rounds.CascadeRounds``).
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

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


def draw(target: router.Target, ids: list[str], proxy: np.ndarray, seed: int) -> tuple[SampleDesign | None, list[str]]:
    """The calibration draws over the rows ``ids`` (sorted) by their proxies, and the rows they are
    (deterministic: the same seed draws the same rows, so a resumed run and the routing pass agree)."""
    if not ids:
        return None, []
    design = router.draw_calibration(target, proxy, seed=seed)
    return design, [ids[int(i)] for i in design.rows_to_label]


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
    ledger: BatchLedger | None,
    *,
    at_once: bool = True,
) -> Calibration:
    """The whole route of the rows ``ids`` (sorted), journaled: the large tier labels the
    importance-weighted draws, the embedding thresholds come from the labels, and the small tier's
    threshold from its answers for the drawn rows the embedding tier leaves. Only drawn rows are
    asked here (``rows_of`` gives them): the small tier answers the others while they are routed.

    ``at_once``: the small tier answers every draw while the large tier labels them (its answers
    do not depend on the labels), which saves a round trip of wall time and buys the small tier's
    answers for the draws the embedding tier decides in vain; otherwise it is asked after the
    labels, only about the draws the embedding tier leaves (the fewest calls: under a LIMIT)."""
    design, sample = draw(target, ids, proxy, seed)
    if design is None:
        route = router.Route(target)
        journal_route(stage, ledger, route, ids, proxy, sample, {})
        return Calibration(route, None, sample, {})
    task = stage.task
    rows = rows_of(sample)
    uses_small = router.Route(target).uses_small
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="semray-calibration-small") as pool:
        asked = pool.submit(answer_at_once, small, rows, stage.batch_rows) if uses_small and at_once else None
        large_answers = answer_at_once(large, rows, stage.batch_rows)
        small_answers = asked.result() if asked is not None else None
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
    if uses_small and small_answers is None:
        decided = route.embedding_decides(proxy)
        left = [row_id for row_id, index in zip(sample, design.rows_to_label, strict=True) if not decided[int(index)]]
        small_answers = answer_at_once(small, rows_of(left), stage.batch_rows)
    if small_answers is not None:
        route = _route_small(route, design, sample, small_answers, small.task, large_keys, proxy)
    journal_route(stage, ledger, route, ids, proxy, sample, large_keys)
    return Calibration(route, design, sample, large_keys)


def _route_small(
    route: router.Route,
    design: SampleDesign,
    sample: list[str],
    answers: pa.Table,
    task: SemanticTask,
    large_keys: dict[str, str | None],
    proxy: np.ndarray,
) -> router.Route:
    """The route with the small tier's confidence threshold, from its answers for the drawn rows
    (those the embedding tier decides count as correct at this stage: `route_small`)."""
    answered = answers.column(ROW_ID).to_pylist()
    keys = dict(zip(answered, answer_keys(answers, task), strict=True))
    confidences = dict(zip(answered, answers.column(CONFIDENCE).to_pylist(), strict=True))
    small_confidence = np.full(proxy.shape[0], router.NOT_ASKED)
    for row_id, index in zip(sample, design.rows_to_label, strict=True):
        value = confidences.get(row_id)
        if value is not None and keys.get(row_id) is not None:
            small_confidence[int(index)] = float(value)
    correct = design.labels_of_draws(
        [float(keys.get(row_id) is not None and keys.get(row_id) == large_keys.get(row_id)) for row_id in sample]
    )
    return router.route_small(route, proxy, small_confidence, design, correct)


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
