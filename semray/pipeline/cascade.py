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

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray
import ray.data as rd

from semray.cost_model import cascade_routes as router
from semray.cost_model.sampling import SampleDesign
from semray.errors import LoweringError
from semray.log import get_logger
from semray.operators.schema import ROW_ID
from semray.operators.templates import template_columns
from semray.pipeline.metering import named_udf, operator_name
from semray.pipeline.row_counts import RowCounts, count_rows
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.semantic import CascadeStage, SemanticTask
from semray.pipeline.udfs import CONFIDENCE, ERROR, KEEP, TIER, SemanticBatchUDF
from semray.serving.deployments import TierHandles
from semray.tasks import TaskKind
from semray.transactions import BatchLedger

if TYPE_CHECKING:
    from semray.pipeline.materialize import ExecutionContext

log = get_logger(__name__)

PROXY = "__proxy"
PROXY_LABEL = "__proxy_label"
SMALL_PREFIX = "__small."
SMALL_CONFIDENCE = SMALL_PREFIX + CONFIDENCE
SMALL_KEY = "__small_key"


def build_cascade(stage: Stage, context: ExecutionContext) -> rd.Dataset:
    # Imported here: materialize registers this builder on import, and Ray workers import
    # this module first when they unpickle the UDF classes below.
    from semray.pipeline.materialize import materialize

    assert isinstance(stage, CascadeStage)
    if context.tiers is None:
        raise LoweringError("a cascade needs model tiers; run it through semray.pipeline.run")
    tiers = context.tiers
    task = stage.task
    target = _target(stage)
    upstream = materialize(stage.inputs[0], context).repartition(target_num_rows_per_block=stage.batch_rows)
    pool = _pool(stage, context)
    name = operator_name(task)  # its passes on the dashboard: "SemFilter[...] embedding proxy", ...
    instruction = tiers.embed([router.instruction_text(task.instruction)])[0]
    labels = tiers.embed(list(task.choices)) if task.kind == TaskKind.CLASSIFY else None
    proxied = upstream.map_batches(
        named_udf(ProxyUDF, f"{name} embedding proxy"), fn_constructor_args=(task, tiers, instruction, labels), **pool
    ).materialize()

    large = SemanticBatchUDF(_on(task, "large"), stage.operator_key, tiers, context.ledger)
    ids, proxy, proxy_label = _proxy_columns(proxied)
    calibration = calibrate_embedding(
        stage, target, large, ids, proxy, proxy_label, lambda sample: _rows(proxied, sample), _seed(stage)
    )
    route, sample, large_keys = calibration.route, calibration.sample, calibration.large_keys

    with_small = proxied
    small_confidence = np.full(len(ids), router.NOT_ASKED)
    if route.uses_small and ids:
        small = SemanticBatchUDF(_on(task, "small"), stage.operator_key + ":small", tiers, context.ledger)
        with_small = proxied.map_batches(
            named_udf(SmallUDF, f"{name} small tier"), fn_constructor_args=(small, route), **pool
        ).materialize()
        small_ids, small_confidence, small_keys = _small_columns(with_small)
        assert small_ids == ids, "the cascade's passes must see the same rows"
        route = calibrate_small(calibration, ids, proxy, small_confidence, small_keys)

    _journal_route(stage, context.ledger, route, ids, proxy, small_confidence, sample, large_keys)
    final: rd.Dataset = with_small.map_batches(
        named_udf(FinalUDF, f"{name} route"), fn_constructor_args=(large, route, frozenset(sample)), **pool
    )
    return final


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


def _target(stage: CascadeStage) -> router.Target:
    return router.Target(
        kind=stage.task.kind,  # the plan checks that cascades are filters, classifications or scores
        metric=stage.metric,
        level=stage.level,
        delta=stage.delta,
        labels=stage.labels,
    )


def _seed(stage: CascadeStage) -> int:
    return int(stage.operator_key[:8], 16)


def _pool(stage: CascadeStage, context: ExecutionContext) -> dict[str, Any]:
    return {
        "compute": rd.ActorPoolStrategy(min_size=1, max_size=stage.actors, max_tasks_in_flight_per_actor=2),
        "batch_size": stage.batch_rows,
        "batch_format": "pyarrow",
        "num_cpus": context.actor_cpus,
    }


def _on(task: SemanticTask, tier: str) -> SemanticTask:
    return dataclasses.replace(task, tier=tier)


def _collect(dataset: rd.Dataset) -> pa.Table:
    tables = [table for table in ray.get(dataset.to_arrow_refs()) if table.num_rows]
    return pa.concat_tables(tables) if tables else pa.table({})


def _proxy_columns(proxied: rd.Dataset) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Row ids (sorted, so the calibration draw does not depend on block order), proxy, proxy label."""
    table = _collect(proxied.select_columns([ROW_ID, PROXY, PROXY_LABEL]))
    if not table.num_rows:
        return [], np.zeros(0), np.zeros(0, dtype=np.int64)
    table = table.sort_by(ROW_ID)
    return (
        [str(value) for value in table.column(ROW_ID).to_pylist()],
        table.column(PROXY).to_numpy().astype(np.float64),
        table.column(PROXY_LABEL).to_numpy().astype(np.int64),
    )


def _small_columns(dataset: rd.Dataset) -> tuple[list[str], np.ndarray, list[str | None]]:
    table = _collect(dataset.select_columns([ROW_ID, SMALL_CONFIDENCE, SMALL_KEY])).sort_by(ROW_ID)
    confidence = table.column(SMALL_CONFIDENCE).fill_null(router.NOT_ASKED).to_numpy().astype(np.float64)
    return [str(value) for value in table.column(ROW_ID).to_pylist()], confidence, table.column(SMALL_KEY).to_pylist()


def _rows(dataset: rd.Dataset, row_ids: list[str]) -> pa.Table:
    wanted = pa.array(row_ids, pa.string())

    def keep(batch: pa.Table) -> pa.Table:
        return batch.filter(pc.is_in(batch.column(ROW_ID), wanted))

    return _collect(dataset.map_batches(keep, batch_format="pyarrow"))


def _answer_in_chunks(udf: SemanticBatchUDF, rows: pa.Table, chunk: int) -> pa.Table:
    parts = [udf.answers(rows.slice(start, chunk)) for start in range(0, rows.num_rows, chunk)]
    return pa.concat_tables(parts) if parts else udf.answers_schema().empty_table()


def answer_keys(answers: pa.Table, task: SemanticTask) -> list[str | None]:
    """Comparable text of each answer (None for a failed row): "true"/"false", a label, a score."""
    errors = answers.column(ERROR).to_pylist()
    if task.kind == TaskKind.FILTER:
        values: list[Any] = answers.column(KEEP).to_pylist()
        texts = [None if value is None else ("true" if value else "false") for value in values]
    else:
        ((name, _),) = task.outputs
        texts = [None if value is None else str(value) for value in answers.column(name).to_pylist()]
    return [None if error is not None else text for text, error in zip(texts, errors, strict=True)]


def _proxy_key(task: SemanticTask, label: int) -> str | None:
    return task.choices[label] if task.kind == TaskKind.CLASSIFY and label >= 0 else None


def _journal_route(
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


def cascade_rounds(stage: Stage, context: ExecutionContext) -> CascadeRounds:
    """A cascade stage as a step of the round trips under a LIMIT (``GrowingLimitStage``)."""
    assert isinstance(stage, CascadeStage)
    if context.tiers is None:
        raise LoweringError("a cascade needs model tiers; run it through semray.pipeline.run")
    return CascadeRounds(
        stage, context.tiers, context.ledger, row_counts=context.row_counts, counted_as=stage.operators
    )


class CascadeRounds:
    """A cascade under a LIMIT, one round of rows at a time on the driver (`limit_rounds.limited_rows`).

    The first round's rows (about ``LIMIT / selectivity``) are the population it calibrates on:
    their proxies, an importance-weighted draw of ``labels`` of them that the large tier labels, the
    small tier on the rows the embedding tier leaves. Every later round is routed row by row with
    the thresholds found: the embedding tier first, the small tier for the rest (not asked at all
    when its threshold decides nothing), the large tier for what neither decides. Where the
    thresholds decide no row below the large tier, the first round that has at least doubled the
    rows seen calibrates again over all of them with twice the draws (the large tier's answers for
    rows it already decided are reused from the journal, so a bigger calibration costs mostly
    small-tier calls). What the cascade promises then holds for the rows it calibrated on, and for
    the later ones as far as they resemble them (docs/cascade.md).

    >>> step = CascadeRounds(stage, tiers, ledger)  # doctest: +SKIP
    >>> limited_rows(batches, [step], wanted=150, first_rows=300)  # doctest: +SKIP
    """

    def __init__(
        self,
        stage: CascadeStage,
        tiers: TierHandles,
        ledger: BatchLedger | None,
        *,
        row_counts: RowCounts | None = None,
        counted_as: tuple[str, ...] = (),
    ) -> None:
        task = stage.task
        self.stage = stage
        self.ledger = ledger
        self.target = _target(stage)
        instruction = tiers.embed([router.instruction_text(task.instruction)])[0]
        labels = tiers.embed(list(task.choices)) if task.kind == TaskKind.CLASSIFY else None
        self.proxy = ProxyUDF(task, tiers, instruction, labels)
        self.large = SemanticBatchUDF(_on(task, "large"), stage.operator_key, tiers, ledger)
        self.small = SemanticBatchUDF(_on(task, "small"), stage.operator_key + ":small", tiers, ledger)
        self.row_counts = row_counts
        self.counted_as = counted_as
        self.seen: list[pa.Table] = []
        """Every round's rows with their proxies: the population of a new calibration."""
        self.route: router.Route | None = None
        self.calibrations = 0
        self.calibrated_rows = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        proxied = self.proxy(batch)
        self.seen.append(proxied)
        seen = sum(table.num_rows for table in self.seen)
        sample: frozenset[str] = frozenset()
        if self.route is None or (not decides_below_large(self.route) and seen >= 2 * self.calibrated_rows):
            with_small, sample = self._calibrate(proxied, seen)
        elif self.route.uses_small and math.isfinite(self.route.small_confidence):
            with_small = SmallUDF(self.small, self.route)(proxied)
        else:
            with_small = proxied
        assert self.route is not None
        output = FinalUDF(self.large, self.route, sample)(with_small)
        if self.row_counts is not None and self.counted_as:
            count_rows(output, self.row_counts, self.counted_as)
        return output

    def _calibrate(self, proxied: pa.Table, seen: int) -> tuple[pa.Table, frozenset[str]]:
        """Calibrate over every row seen; this round's rows with the small tier's answers, and
        which of them were drawn (the large tier answers those)."""
        population = pa.concat_tables(self.seen, promote_options="default").sort_by(ROW_ID)
        ids = [str(value) for value in population.column(ROW_ID).to_pylist()]
        proxy = population.column(PROXY).to_numpy().astype(np.float64)
        proxy_label = population.column(PROXY_LABEL).to_numpy().astype(np.int64)
        target = dataclasses.replace(self.target, labels=self.target.labels * 2**self.calibrations)

        def rows_of(row_ids: list[str]) -> pa.Table:
            return population.filter(pc.is_in(population.column(ROW_ID), pa.array(row_ids, pa.string())))

        calibration = calibrate_embedding(
            self.stage, target, self.large, ids, proxy, proxy_label, rows_of, _seed(self.stage) + self.calibrations
        )
        route, with_small = calibration.route, proxied
        small_confidence = np.full(len(ids), router.NOT_ASKED)
        if route.uses_small:
            answered = SmallUDF(self.small, route)(population)
            small_confidence = answered.column(SMALL_CONFIDENCE).fill_null(router.NOT_ASKED).to_numpy()
            small_keys = answered.column(SMALL_KEY).to_pylist()
            route = calibrate_small(calibration, ids, proxy, small_confidence.astype(np.float64), small_keys)
            with_small = answered.filter(pc.is_in(answered.column(ROW_ID), proxied.column(ROW_ID)))
            with_small = with_small.take(_positions(with_small, proxied))
        _journal_route(
            self.stage, self.ledger, route, ids, proxy, small_confidence, calibration.sample, calibration.large_keys
        )
        self.route, self.calibrations, self.calibrated_rows = route, self.calibrations + 1, seen
        return with_small, frozenset(calibration.sample) & frozenset(
            str(value) for value in proxied.column(ROW_ID).to_pylist()
        )


def decides_below_large(route: router.Route) -> bool:
    """Whether the route's thresholds let the embedding or the small tier decide any row."""
    embedding = (route.embed_low, route.embed_high, route.embed_confidence)
    small = route.small_confidence if route.uses_small else math.inf
    return any(math.isfinite(value) for value in embedding) or math.isfinite(small)


def _positions(rows: pa.Table, order: pa.Table) -> pa.Array:
    """Indices into ``rows`` that put them in the row order of ``order`` (same row ids)."""
    position = {row_id: index for index, row_id in enumerate(rows.column(ROW_ID).to_pylist())}
    return pa.array([position[row_id] for row_id in order.column(ROW_ID).to_pylist()], pa.int64())


class ProxyUDF:
    """Adds the embedding proxy of each row: a filter's score, or a label index and its confidence."""

    def __init__(
        self, task: SemanticTask, tiers: TierHandles, instruction: np.ndarray, labels: np.ndarray | None
    ) -> None:
        self.task = task
        self.tiers = tiers
        self.instruction = instruction
        self.labels = labels
        self.columns = template_columns(task.instruction, "cascade")

    def __call__(self, batch: pa.Table) -> pa.Table:
        n = batch.num_rows
        if n == 0 or self.task.kind == TaskKind.SCORE:
            return batch.append_column(PROXY, pa.array(np.zeros(n))).append_column(
                PROXY_LABEL, pa.array(np.full(n, -1))
            )
        rows = batch.select(list(self.columns)).to_pylist()
        texts = [" ".join("" if row[column] is None else str(row[column]) for column in self.columns) for row in rows]
        vectors = self.tiers.embed(texts)
        if self.labels is not None:
            label, confidence = router.classify_proxy(vectors, self.labels)
        else:
            confidence, label = router.filter_proxy(vectors, self.instruction), np.full(n, -1)
        return batch.append_column(PROXY, pa.array(confidence, pa.float64())).append_column(
            PROXY_LABEL, pa.array(label, pa.int64())
        )


class SmallUDF:
    """Asks the small tier about the rows the embedding tier does not decide; adds its answers."""

    def __init__(self, small: SemanticBatchUDF, route: router.Route) -> None:
        self.small = small
        self.route = route

    def __call__(self, batch: pa.Table) -> pa.Table:
        proxy = batch.column(PROXY).to_numpy()
        asked = ~self.route.embedding_decides(proxy)
        schema = self.small.answers_schema()
        answers = self.small.answers(_user_columns(batch).filter(pa.array(asked)))
        position = {row_id: index for index, row_id in enumerate(answers.column(ROW_ID).to_pylist())}
        order = pa.array([position.get(row_id) for row_id in batch.column(ROW_ID).to_pylist()], pa.int64())
        aligned = answers.take(order)  # null index -> null row for rows not asked
        result = batch
        for field in schema:
            if field.name != ROW_ID:
                result = result.append_column(
                    pa.field(SMALL_PREFIX + field.name, field.type), aligned.column(field.name)
                )
        keys = answer_keys(aligned, self.small.task)
        return result.append_column(SMALL_KEY, pa.array(keys, pa.string()))


class FinalUDF:
    """Gives each row the answer of the tier that decides it; asks the large tier for the rest."""

    def __init__(self, large: SemanticBatchUDF, route: router.Route, sample: frozenset[str]) -> None:
        self.large = large
        self.route = route
        self.sample = sample

    def __call__(self, batch: pa.Table) -> pa.Table:
        user = _user_columns(batch)
        if batch.num_rows == 0:
            return self.large.apply(user, self.large.answers_schema().empty_table())
        proxy = batch.column(PROXY).to_numpy()
        small_confidence = (
            batch.column(SMALL_CONFIDENCE).fill_null(router.NOT_ASKED).to_numpy()
            if SMALL_CONFIDENCE in batch.column_names
            else np.full(batch.num_rows, router.NOT_ASKED)
        )
        decided_by = self.route.tiers(proxy, small_confidence)
        in_sample = np.array([row_id in self.sample for row_id in batch.column(ROW_ID).to_pylist()])
        decided_by[in_sample] = router.LARGE
        parts = [
            self._embedding(batch.filter(pa.array(decided_by == router.EMBEDDING))),
            self._small(batch.filter(pa.array(decided_by == router.SMALL))),
            self.large.answers(user.filter(pa.array(decided_by == router.LARGE))),
        ]
        output = self.large.apply(user, pa.concat_tables(parts))
        self.large.meter.on_tier("cascade").decided(
            {name: int(np.sum(decided_by == code)) for code, name in enumerate(router.TIER_NAMES)}
        )
        return output

    def _embedding(self, rows: pa.Table) -> pa.Table:
        schema = self.large.answers_schema()
        n = rows.num_rows
        proxy = rows.column(PROXY).to_numpy() if n else np.zeros(0)
        columns: dict[str, Any] = {
            ROW_ID: rows.column(ROW_ID).cast(pa.string()) if n else pa.array([], pa.string()),
            ERROR: pa.nulls(n, pa.string()),
            TIER: pa.array(["embedding"] * n, pa.string()),
            CONFIDENCE: pa.array(proxy, pa.float64()),
        }
        task = self.large.task
        if task.kind == TaskKind.FILTER:
            columns[KEEP] = pa.array(self.route.embedding_answer(proxy), pa.bool_())
        else:
            ((name, _),) = task.outputs
            labels = rows.column(PROXY_LABEL).to_pylist() if n else []
            columns[name] = pa.array([task.choices[label] for label in labels], pa.string())
        return pa.table(columns).select(schema.names).cast(schema)

    def _small(self, rows: pa.Table) -> pa.Table:
        schema = self.large.answers_schema()
        if rows.num_rows == 0:  # also when the route never asked the small tier (no such columns)
            return schema.empty_table()
        columns = {ROW_ID: rows.column(ROW_ID).cast(pa.string())}
        for field in schema:
            if field.name != ROW_ID:
                columns[field.name] = rows.column(SMALL_PREFIX + field.name)
        return pa.table(columns).select(schema.names).cast(schema)


def _user_columns(batch: pa.Table) -> pa.Table:
    return batch.select([name for name in batch.column_names if not name.startswith("__")])
