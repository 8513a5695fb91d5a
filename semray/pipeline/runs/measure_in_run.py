"""Statistics measured inside a run before the optimizer picks tiers; the labels bought are reused.

``Query.execute(policy=MinCost(quality=0.9), measure=True)`` runs in one transactional run:

1. **What is measured.** Every chain of row-wise semantic operators directly over a relational
   input (`measurable_chains`): one operator, or semantic filters in order (one conjunction,
   measured by progressive sampling) optionally topped by one map/classify/extract. Operators
   above another semantic operator are not measured (their input would need model answers).
2. **Pre-sample.** The chain's relational input runs through the engine (Ray Data) and a uniform
   sample of at most ``sample_rows`` rows is kept (`draw_presample`): the rows with the smallest
   hash of (seed, ``_rowid``), so the sample does not depend on batch order and a resumed run,
   whose seed comes from the same run id, draws the same rows.
3. **Labels.** The embedding tier scores each pre-sampled row against each filter's instruction
   (`similarity_scores`), `measure_statistics` draws up to ``budget`` rows by importance and the
   top tier labels them through `SemanticBatchUDF`: the same requests execution sends, committed
   to the run's ledger under ``estimation_key(statistics_key(node), tier)``. The ``calibrate``
   tiers answer the same rows (their agreement is the quality model selection reads), journaled
   the same way under their own tier.
   Per operator that can cascade, the labelled rows also become a ``CascadePool`` (`cascade_pools`:
   the cascade's own proxies, both tiers' answers, the small tier's confidence, each row's
   weight in the importance draw), from which the cost model prices a cascade at any target.
4. **Reuse.** At execution every semantic batch looks up its rows under its operator key, then
   under the estimation key of its question *and its own tier*: rows labelled during estimation
   are not asked again, and a resumed run re-measures for free (every drawn row is found).

The estimates are over the pre-sample (a population of at most ``sample_rows`` rows), not the
whole input: fractions (selectivity, quality, tokens per row) carry over, the pre-sample's own
sampling error is not in their intervals.

>>> [tuple(node.label() for node in chain) for chain in measurable_chains(plan)]  # doctest: +SKIP
[('SemFilter', 'SemClassify')]
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from semray.cost_model import cascade_routes as router
from semray.cost_model.cascade_cost import SMALL_TIER, cascade_kind
from semray.cost_model.cascade_shares import CascadePool
from semray.cost_model.estimates import Interval
from semray.cost_model.measure import Measurement, OperatorMeasurement, measure_statistics, similarity_scores
from semray.cost_model.relational import measure_source_filters
from semray.cost_model.statistics import PlanStatistics
from semray.cost_model.tokens import question_of
from semray.errors import PlanError
from semray.log import get_logger
from semray.operators.base import Node, walk
from semray.operators.keys import source_key, statistics_key
from semray.operators.relational import Project, Scan
from semray.operators.schema import ROW_ID
from semray.operators.semantic import SemanticNode, is_row_semantic
from semray.operators.templates import template_columns
from semray.pipeline.lowering.semantic import semantic_task
from semray.pipeline.stages.semantic import estimation_key
from semray.pipeline.workers.cascade_tiers import PROXY, PROXY_LABEL, ProxyUDF
from semray.pipeline.workers.semantic_batches import CONFIDENCE, ERROR, KEEP, SemanticBatchUDF
from semray.settings import Settings
from semray.tasks import TaskKind
from semray.transactions import BatchLedger, LLMUsage

log = get_logger(__name__)

Row = Mapping[str, object]


@dataclass(frozen=True, slots=True)
class MeasureOptions:
    """How much a run spends measuring, e.g. ``MeasureOptions(budget=50)``.

    ``budget``: importance draws per chain (at most that many rows labelled per operator by each
    tier); ``sample_rows``: the uniform pre-sample of each chain's input they are drawn from;
    ``calibrate``: tiers whose agreement with ``top_tier`` is measured on the same rows.
    """

    budget: int = 100
    sample_rows: int = 2000
    calibrate: tuple[str, ...] = ("small",)
    top_tier: str = "large"

    def __post_init__(self) -> None:
        if self.budget < 1 or self.sample_rows < 1:
            raise PlanError(f"measuring needs budget >= 1 and sample_rows >= 1, got {self.budget}, {self.sample_rows}")
        if self.top_tier in self.calibrate:
            raise PlanError(f"tier {self.top_tier!r} is the reference; calibrate other tiers against it")

    @property
    def tiers(self) -> tuple[str, ...]:
        """Tiers measuring calls: the embedding proxy, the top tier and the calibrated ones."""
        return ("embedding", self.top_tier, *self.calibrate)

    def to_json(self) -> dict[str, Any]:
        return {"budget": self.budget, "sample_rows": self.sample_rows, "calibrate": list(self.calibrate)}


@dataclass(frozen=True, slots=True)
class Planning:
    """A run that measures its statistics and then plans with them (``Query.execute(measure=True)``).

    ``choose`` is the optimizer bound to its policy and price profiles (the pipeline does not
    import the planner); ``policy`` names it for the journal and the run's identity.
    """

    choose: Callable[[PlanStatistics], Node]
    options: MeasureOptions = field(default_factory=MeasureOptions)
    policy: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**self.options.to_json(), "policy": self.policy}


@dataclass(frozen=True, slots=True)
class LabelCost:
    """What one tier answered for one operator while measuring: distinct rows, how many of them
    were already journaled (a resumed run), and what the rest paid."""

    key: str
    label: str
    tier: str
    rows: int
    reused: int
    usage: LLMUsage

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "tier": self.tier,
            "rows": self.rows,
            "reused": self.reused,
            "usage": self.usage.model_dump(mode="json"),
        }


@dataclass(frozen=True, slots=True)
class MeasuredRun:
    """The statistics a run measured, and what measuring cost per operator and tier."""

    statistics: PlanStatistics
    costs: tuple[LabelCost, ...] = ()
    presampled: tuple[tuple[str, int, int], ...] = ()
    """Per chain: (bottom operator's statistics key, input rows, pre-sample rows)."""

    @property
    def usage(self) -> LLMUsage:
        total = LLMUsage()
        for cost in self.costs:
            total = total + cost.usage
        return total

    @property
    def labels(self) -> int:
        """Distinct (operator, tier, row) answers measuring used, bought now or earlier."""
        return sum(cost.rows for cost in self.costs)

    def to_json(self) -> dict[str, Any]:
        return {
            "statistics": statistics_json(self.statistics),
            "costs": [cost.to_json() for cost in self.costs],
            "presampled": [list(item) for item in self.presampled],
        }


# which operators --------------------------------------------------------------------------


def measurable_chains(plan: Node) -> tuple[tuple[Node, ...], ...]:
    """Chains of row-wise semantic operators directly over a relational input, bottom first.

    A chain is semantic filters in order, optionally topped by one more row-wise operator; the
    longest chain ending at each operator not itself inside a longer one.
    """
    chains: list[tuple[Node, ...]] = []

    def visit(node: Node) -> None:
        chain = _chain_ending_at(node)
        if chain is not None:
            chains.append(chain)
            return
        for child in node.children:
            visit(child)

    visit(plan)
    return tuple(chains)


def _chain_ending_at(node: Node) -> tuple[Node, ...] | None:
    if not is_row_semantic(node):
        return None
    (below,) = node.children
    if _relational(below):
        return (node,)
    if _semantic_filter(below):
        chain = _chain_ending_at(below)
        if chain is not None and all(_semantic_filter(link) for link in chain):
            return (*chain, node)
    return None


def _semantic_filter(node: Node) -> bool:
    return is_row_semantic(node) and isinstance(node, SemanticNode) and node.task_kind() == TaskKind.FILTER


def _relational(node: Node) -> bool:
    return not any(child.calls_llm for child in walk(node))


# the pre-sample ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Presample:
    """A uniform sample of an input (``table``) and the input's row count (``rows``)."""

    table: pa.Table
    rows: int


def draw_presample(batches: Iterable[pa.Table], size: int, seed: int) -> Presample:
    """The ``size`` rows with the smallest hash of (seed, ``_rowid``): uniform without
    replacement, the same rows in the same order whatever the batches' order.

    >>> batch = pa.table({"_rowid": [str(i) for i in range(10)], "x": list(range(10))})
    >>> a = draw_presample([batch.slice(0, 5), batch.slice(5)], 3, seed=7)
    >>> b = draw_presample([batch.slice(5), batch.slice(0, 5)], 3, seed=7)
    >>> a.table.equals(b.table), a.rows, a.table.num_rows
    (True, 10, 3)
    """
    kept: pa.Table | None = None
    rows = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        rows += batch.num_rows
        priority = pa.array([_priority(seed, str(row_id)) for row_id in batch.column(ROW_ID).to_pylist()], pa.uint64())
        ranked = batch.append_column(_PRIORITY, priority)
        kept = ranked if kept is None else pa.concat_tables([kept, ranked.cast(kept.schema)])
        if kept.num_rows > size:
            kept = kept.take(pc.sort_indices(kept, [(_PRIORITY, "ascending")])[:size])
    if kept is None:
        return Presample(pa.table({ROW_ID: pa.array([], pa.string())}), 0)
    kept = kept.take(pc.sort_indices(kept, [(_PRIORITY, "ascending"), (ROW_ID, "ascending")]))
    return Presample(kept.drop_columns([_PRIORITY]), rows)


_PRIORITY = "__presample_priority"


def _priority(seed: int, row_id: str) -> int:
    digest = hashlib.blake2b(f"{seed}:{row_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def read_presample(node: Node, settings: Settings, size: int, seed: int) -> Presample:
    """Run the relational plan ``node`` through the engine and keep a uniform pre-sample of it."""
    from semray.pipeline.lowering.driver import lower
    from semray.pipeline.ray import materialize

    schema = node.output_schema.to_arrow()
    batches = materialize.iter_batches(lower(node, settings), schema, settings.batch_size)
    return draw_presample(batches, size, seed)


def seed_of(*parts: str) -> int:
    """A 32-bit seed from text: the run id (and an operator key), so a resumed run draws the same."""
    return int(hashlib.sha256(":".join(parts).encode()).hexdigest()[:8], 16)


# labellers and the proxy -------------------------------------------------------------------


class _PayingUDF(SemanticBatchUDF):
    """A SemanticBatchUDF that adds up what its commits paid."""

    paid: LLMUsage = LLMUsage()

    def _commit(self, answers: pa.Table, usage: LLMUsage) -> None:
        self.paid = self.paid + usage
        super()._commit(answers, usage)


class TierLabeller:
    """A tier as `measure_statistics`'s labeller: asks exactly what execution would ask that tier,
    through `SemanticBatchUDF`, and journals the answers under the question's estimation key."""

    def __init__(self, tiers: Any, ledger: BatchLedger, tier: str, schema: pa.Schema, batch_rows: int) -> None:
        self.tiers = tiers
        self.ledger = ledger
        self.tier = tier
        self.schema = schema
        self.batch_rows = batch_rows
        self.costs: list[LabelCost] = []
        self.answered: dict[str, pa.Table] = {}
        """statistics_key -> the answers table (with ``_confidence``) of every row this tier labelled."""

    def __call__(self, node: Node, rows: Sequence[Row]) -> list[object]:
        task = dataclasses.replace(semantic_task(node), tier=self.tier)
        key = estimation_key(statistics_key(node), self.tier)
        table = pa.Table.from_pylist([dict(row) for row in rows], schema=self.schema)
        ids = [str(value) for value in table.column(ROW_ID).to_pylist()]
        reused = len(ids) - len(self.ledger.lookup_rows(key, ids).missing)
        udf = _PayingUDF(task, key, self.tiers, self.ledger)
        parts = [
            udf.answers(table.slice(start, self.batch_rows)) for start in range(0, table.num_rows, self.batch_rows)
        ]
        answers = pa.concat_tables(parts) if parts else udf.answers_schema().empty_table()
        self.costs.append(LabelCost(statistics_key(node), node.label(), self.tier, len(set(ids)), reused, udf.paid))
        earlier = self.answered.get(statistics_key(node))
        self.answered[statistics_key(node)] = answers if earlier is None else pa.concat_tables([earlier, answers])
        return answer_values(answers, task.kind, tuple(name for name, _ in task.outputs), ids)


def answer_values(answers: pa.Table, kind: str, outputs: tuple[str, ...], ids: Sequence[str]) -> list[object]:
    """One plain answer per row id, in ``ids`` order: a filter's bool, an extraction's dict of
    fields, the output value otherwise; None for a row the tier could not answer."""
    by_id: dict[str, object] = {}
    for row in answers.to_pylist():
        if row[ERROR] is not None:
            value: object = None
        elif kind == TaskKind.FILTER:
            value = row[KEEP]
        elif kind == TaskKind.EXTRACT:
            value = {name: row[name] for name in outputs}
        else:
            value = row[outputs[0]]
        by_id[str(row[ROW_ID])] = value
    return [by_id.get(row_id) for row_id in ids]


class EmbeddingProxy:
    """Proxy scores from the embedding tier: each row's referenced cells against the instruction."""

    def __init__(self, tiers: Any) -> None:
        self.tiers = tiers

    def __call__(self, node: Node, rows: Sequence[Row]) -> npt.NDArray[np.float64]:
        instruction = question_of(node).instruction
        columns = template_columns(instruction, node.label())
        texts = [
            " ".join("" if row.get(column) is None else str(row.get(column)) for column in columns) for row in rows
        ]
        vectors = self.tiers.embed(texts)
        query = self.tiers.embed([router.instruction_text(instruction)])[0]
        return similarity_scores(vectors, query)


# measuring -----------------------------------------------------------------------------


def measure_chain(
    chain: Sequence[Node],
    presample: Presample,
    tiers: Any,
    ledger: BatchLedger,
    options: MeasureOptions,
    seed: int,
    *,
    batch_rows: int = 64,
) -> MeasuredRun:
    """Measure one chain on its pre-sample: statistics, and the labels' cost per operator and tier.

    ``tiers`` is a ``TierHandles`` (``generate`` and ``embed``); ``batch_rows`` rows per model call.
    """
    schema = presample.table.schema
    top = TierLabeller(tiers, ledger, options.top_tier, schema, batch_rows)
    others = {tier: TierLabeller(tiers, ledger, tier, schema, batch_rows) for tier in options.calibrate}
    bottom = statistics_key(chain[0])
    if not presample.table.num_rows:
        return MeasuredRun(PlanStatistics(), (), ((bottom, presample.rows, 0),))
    measurement = measure_statistics(
        tuple(chain),
        presample.table,
        EmbeddingProxy(tiers),
        top,
        budget=options.budget,
        seed=seed_of(str(seed), statistics_key(chain[-1])),
        tier_labellers=others,
    )
    statistics = measurement.statistics()
    pools = cascade_pools(measurement, presample, tiers, top, others.get(SMALL_TIER))
    statistics = statistics.merged(PlanStatistics(cascade_pools=pools))
    scan = _scan_below(chain[0].children[0])
    if scan is not None:
        statistics = statistics.merged(PlanStatistics(source_rows={source_key(scan): Interval.exact(presample.rows)}))
    costs = (*top.costs, *(cost for labeller in others.values() for cost in labeller.costs))
    return MeasuredRun(statistics, tuple(costs), ((bottom, presample.rows, presample.table.num_rows),))


# cascade pools ---------------------------------------------------------------------------


def cascade_pools(
    measurement: Measurement,
    presample: Presample,
    tiers: Any,
    top: TierLabeller,
    small: TierLabeller | None,
) -> dict[str, CascadePool]:
    """Per measured operator that can cascade, its labelled rows as the cascade would see them.

    The proxy of each row is computed by the cascade's own `ProxyUDF` (a filter's similarity to
    the instruction, a classification's label softmax and nearest label); the answers are the
    large and small tiers' from measuring, with the small tier's ``_confidence``; each row's
    weight is its Hansen-Hurwitz weight in the importance sample (`Measurement.row_weights`).
    Nothing without a small tier calibrated, nothing for an operator no labelled row reached.
    """
    if small is None:
        return {}
    weights = measurement.row_weights()
    pools: dict[str, CascadePool] = {}
    for measured in measurement.operators:
        kind = cascade_kind(measured.node)
        ids = list(measured.labels)
        if kind is None or not ids or SMALL_TIER not in measured.tier_answers:
            continue
        pools[measured.key] = _pool(measured, kind, ids, weights, presample, tiers, small)
        log.info("cascade_pool_kept", operator=measured.node.label(), key=measured.key, **pools[measured.key].to_json())
    return pools


def _pool(
    measured: OperatorMeasurement,
    kind: TaskKind,
    ids: list[str],
    weights: Mapping[str, float],
    presample: Presample,
    tiers: Any,
    small: TierLabeller,
) -> CascadePool:
    task = semantic_task(measured.node)
    wanted = pa.array(ids, pa.string())
    rows = presample.table.filter(pc.is_in(presample.table.column(ROW_ID).cast(pa.string()), wanted))
    instruction = tiers.embed([router.instruction_text(task.instruction)])[0]
    labels = tiers.embed(list(task.choices)) if kind == TaskKind.CLASSIFY else None
    proxied = ProxyUDF(task, tiers, instruction, labels)(rows)  # exactly what the cascade computes
    position = {str(row_id): index for index, row_id in enumerate(proxied.column(ROW_ID).to_pylist())}
    order = [position[row_id] for row_id in ids]
    proxy = proxied.column(PROXY).to_numpy()[order]
    nearest = proxied.column(PROXY_LABEL).to_numpy()[order]
    confidence = _confidences(small.answered.get(measured.key), ids)
    row_weights = [weights.get(row_id, 0.0) for row_id in ids]
    small_answers = measured.tier_answers[SMALL_TIER]
    return CascadePool(
        kind=kind,
        proxy=tuple(float(value) for value in proxy),
        large_answers=tuple(measured.labels[row_id] for row_id in ids),
        small_answers=tuple(small_answers.get(row_id) for row_id in ids),
        small_confidence=confidence,
        weights=tuple(row_weights),
        proxy_answers=tuple(task.choices[int(label)] if label >= 0 else None for label in nearest)
        if kind == TaskKind.CLASSIFY
        else None,
        # Self-normalised: the weights' total over every labelled row stands for the whole pre-sample.
        population=round(presample.table.num_rows * sum(row_weights) / max(sum(weights.values()), 1e-12)),
    )


def _confidences(answers: pa.Table | None, ids: Sequence[str]) -> tuple[float, ...]:
    """The small tier's confidence per row id; `router.NOT_ASKED` where it has none, as the cascade reads it."""
    if answers is None:
        return (router.NOT_ASKED,) * len(ids)
    found = dict(
        zip(
            (str(row_id) for row_id in answers.column(ROW_ID).to_pylist()),
            answers.column(CONFIDENCE).to_pylist(),
            strict=True,
        )
    )
    return tuple(router.NOT_ASKED if found.get(row_id) is None else float(found[row_id]) for row_id in ids)


def _scan_below(node: Node) -> Scan | None:
    """The Scan under ``node`` when only projections lie between (they keep every row)."""
    while isinstance(node, Project):
        node = node.input
    return node if isinstance(node, Scan) else None


def measure_plan(
    plan: Node, settings: Settings, tiers: Any, ledger: BatchLedger, options: MeasureOptions, seed: int
) -> MeasuredRun:
    """Measure every chain of ``plan`` (`measurable_chains`) on a pre-sample of its input."""
    chains = measurable_chains(plan)
    log.info(
        "statistics_measuring",
        chains=[[node.label() for node in chain] for chain in chains],
        budget=options.budget,
        sample_rows=options.sample_rows,
        tiers=[options.top_tier, *options.calibrate],
    )
    measured = MeasuredRun(measure_source_filters(plan, options.sample_rows, seed))
    for chain in chains:
        presample = read_presample(chain[0].children[0], settings, options.sample_rows, seed)
        found = measure_chain(chain, presample, tiers, ledger, options, seed, batch_rows=settings.semantic_batch_size)
        for node in chain:
            _log_operator(node, found)
        measured = MeasuredRun(
            measured.statistics.merged(found.statistics),
            measured.costs + found.costs,
            measured.presampled + found.presampled,
        )
    usage = measured.usage
    log.info(
        "statistics_measured",
        operators=len({cost.key for cost in measured.costs}),
        labels=measured.labels,
        reused=sum(cost.reused for cost in measured.costs),
        calls=usage.calls,
        dollars=round(usage.dollars, 6),
    )
    return measured


def _log_operator(node: Node, found: MeasuredRun) -> None:
    key = statistics_key(node)
    statistics = found.statistics
    selectivity = statistics.selectivity.get(key)
    costs = {cost.tier: cost for cost in found.costs if cost.key == key}
    log.info(
        "operator_measured",
        operator=node.label(),
        key=key,
        selectivity=None if selectivity is None else _interval_json(selectivity),
        quality={tier: round(value, 4) for (of, tier), value in statistics.tier_quality.items() if of == key},
        labels={tier: cost.rows for tier, cost in costs.items()},
        reused={tier: cost.reused for tier, cost in costs.items()},
        dollars=round(sum(cost.usage.dollars for cost in costs.values()), 6),
    )


def statistics_json(statistics: PlanStatistics) -> dict[str, Any]:
    """``PlanStatistics`` as JSON for the journal: intervals as ``[value, low, high]``."""
    return {
        "source_rows": {key: _interval_json(value) for key, value in statistics.source_rows.items()},
        "selectivity": {key: _interval_json(value) for key, value in statistics.selectivity.items()},
        "tokens_per_row": {key: _interval_json(value) for key, value in statistics.tokens_per_row.items()},
        "output_tokens_per_row": {
            key: _interval_json(value) for key, value in statistics.output_tokens_per_row.items()
        },
        "tier_quality": {f"{key}:{tier}": value for (key, tier), value in statistics.tier_quality.items()},
        "cascade_pools": {key: pool.to_json() for key, pool in statistics.cascade_pools.items()},
    }


def _interval_json(interval: Interval) -> list[float]:
    return [round(interval.value, 6), round(interval.low, 6), round(interval.high, 6)]
