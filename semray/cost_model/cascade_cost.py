"""The price of a cascade: embedding tier on every row, calibration labels and undecided rows on
the large tier, the small tier on every row.

A row-wise operator that can cascade (a SemFilter, a SemClassify, a score SemMap; see
``Semantic.cascade_target``) priced on the ``"cascade"`` tier runs as `semray.pipeline.ray.cascade`
runs it, so over ``N`` input rows with target ``labels`` calibration draws:

* the **embedding** tier embeds every row (``N`` calls, the row's referenced text; scores
  have no embedding stage) and decides a share ``e`` of them;
* the **large** tier labels the calibration draws (at most ``min(labels, N)`` distinct rows)
  and answers the rows nobody cheaper decides, ``l = 1 - e - s`` of the rest:
  ``large rows = L + l (N - L)`` with ``L = min(labels, N)`` (drawn rows are as likely as
  any to be undecided; they favour uncertain rows, so this errs high);
* the **small** tier answers every row, ``N`` rows (the draws while the large tier labels them,
  the rest while the calibration runs, so before the embedding tier's thresholds are known), and
  decides a share ``s`` of all rows (recall and precision targets skip it: ``s = 0``).

Each tier's rows are priced by `semray.cost_model.plan_cost.model_estimate` with the
operator's prompt and completion tokens per row (the embedding tier gets the prompt without
its fixed part: the embedded text). Dollars, GPU-seconds and tokens are summed over the
tiers. Latency is the projected wall time of `semray.cost_model.cascade_wall` (the proxy pass, then
the large tier's labels and routed rows beside the small tier's answers), less the one actor pool's
start every stage pays (single-tier operators' latency leaves it out too); ``CascadeEstimate.wall``
keeps the projection by part and the large tier's alone over the same rows, which the planner compares
(`semray.planner.cascade_wall_choice`).
Quality is `semray.cost_model.quality.cascade_quality` of the target: ``(1 - delta) level``.

The shares ``(e, s)`` come from the operator's ``PlanStatistics.cascade_pools`` entry when a
measured run kept one (`semray.cost_model.cascade_shares.CascadePool`: the router's own threshold
choice run on the labelled rows, at the target being priced), else from
``PlanStatistics.cascade_shares`` (measured with
`semray.cost_model.cascade_shares.measure_cascade_shares`); unmeasured, or when the pool has too
few rows for the target, `DEFAULT_CASCADE_SHARES` is assumed and ``"cascade_shares"`` is noted
in the estimate's ``assumed``.

>>> from semray.operators import Scan, SemFilter, Schema, SourceSpec
>>> from semray.cost_model.plan_cost import estimate_plan
>>> from semray.cost_model.prices import TierProfile
>>> from semray.cost_model.statistics import PlanStatistics
>>> from semray.operators.keys import statistics_key
>>> scan = Scan(source=SourceSpec(kind="csv", path="r.csv"), source_schema=Schema.of(("review", "VARCHAR")))
>>> plan = SemFilter(input=scan, instruction="{review} is positive", tier="cascade")
>>> key = statistics_key(plan)
>>> stats = PlanStatistics(source_rows={"csv:r.csv": Interval.exact(10_000)},
...     selectivity={key: Interval.exact(0.2)}, tokens_per_row={key: Interval.exact(100)},
...     cascade_shares={key: (Interval.exact(0.3), Interval.exact(0.5))})
>>> profiles = {"embedding": TierProfile("embedding", 0.0, 0.0, 0.0, float("inf"), 8),
...     "small": TierProfile("small", 0.15, 0.6, 0.0, float("inf"), 8),
...     "large": TierProfile("large", 2.5, 10.0, 0.0, float("inf"), 8)}
>>> cascade = estimate_plan(plan, stats, profiles).operator("")
>>> split = cascade.cascade
>>> (round(split.small_rows.value), round(split.large_rows.value), round(cascade.quality, 4))
(10000, 2160, 0.855)
"""

from __future__ import annotations

from dataclasses import dataclass

from semray.cost_model.cascade_wall import STAGE_START_S, CascadeWall, cascade_wall
from semray.cost_model.estimates import ZERO, EstimateError, Interval, OperatorEstimate, total
from semray.cost_model.plan_cost import CASCADE_TIER, EstimationContext, model_estimate
from semray.cost_model.quality import cascade_quality
from semray.log import get_logger
from semray.operators.base import Node
from semray.operators.keys import statistics_key
from semray.operators.semantic import QualityTarget, Semantic, SemanticNode
from semray.tasks import TaskKind

log = get_logger(__name__)

CascadeKind = TaskKind
"""A kind the router cascades (``TaskKind.cascades``): filter, classify or score."""
EMBEDDING_TIER = "embedding"
SMALL_TIER = "small"

DEFAULT_CASCADE_SHARES: dict[CascadeKind, tuple[Interval, Interval]] = {
    TaskKind.FILTER: (Interval(0.05, 0.0, 0.5), Interval(0.35, 0.0, 0.9)),
    TaskKind.CLASSIFY: (Interval(0.05, 0.0, 0.5), Interval(0.35, 0.0, 0.9)),
    TaskKind.SCORE: (ZERO, Interval(0.4, 0.0, 0.9)),
}
"""(embedding share, small share) of a cascade's rows when nobody measured them: the large tier
answers about 0.6 of the rows besides its calibration labels, between the medical cascade
benchmark's classification at accuracy 0.9 (about 0.45) and its filter (about 0.9), with
intervals from none to most of the rows (benchmarks/RESULTS.md, ``cascade``)."""


def cascade_kind(node: Node) -> CascadeKind | None:
    """What the router would cascade ``node`` as: ``"filter"``, ``"classify"``, ``"score"``
    (a SemMap with ``lo``/``hi``), or None when it cannot cascade (``SemanticNode.cascade_kind``)."""
    return node.cascade_kind() if isinstance(node, SemanticNode) else None


@dataclass(frozen=True, slots=True)
class CascadeSplit:
    """How a cascade's rows divide between the tiers: the share of input rows each tier decides
    (``large_share`` excludes the calibration labels), and the rows each tier answers."""

    target: QualityTarget
    embedding_share: Interval
    small_share: Interval
    large_share: Interval
    labels: Interval
    embedding_rows: Interval
    small_rows: Interval
    large_rows: Interval


@dataclass(frozen=True, slots=True)
class CascadeEstimate(OperatorEstimate):
    """An `OperatorEstimate` with tier ``"cascade"`` and its split between the tiers."""

    cascade: CascadeSplit | None = None
    wall: CascadeWall | None = None


def cascade_shares(
    node: Node, kind: CascadeKind, target: QualityTarget, context: EstimationContext
) -> tuple[Interval, Interval]:
    """(embedding share, small share) of ``node``'s rows at ``target``.

    From the operator's `CascadePool` when measuring kept one with rows enough for the target
    (computed at this very target, memoised per target); else measured ``cascade_shares``; else
    `DEFAULT_CASCADE_SHARES`, noted as assumed (the note says when a pool was too small).
    """
    key = statistics_key(node)
    found: tuple[Interval, Interval] | None = None
    too_few = ""
    pool = context.statistics.cascade_pools.get(key)
    if pool is not None:
        if pool.supports(target):
            found = pool.shares(target)
        else:
            too_few = (
                f"its measured pool has {pool.effective_rows:.0f} effective rows, fewer than the "
                f"{pool.rows_needed(target):.0f} accuracy {target.level:g} needs; "
            )
            log.debug("cascade_pool_too_small", operator=node.label(), key=key, level=target.level)
    if found is None:
        found = context.statistics.cascade_shares.get(key)
    if found is None:
        context.missing(
            "cascade_shares",
            f"no cascade shares measured for {node.label()} (key {key}); {too_few}measure them with "
            "semray.cost_model.cascade_shares.measure_cascade_shares on a labelled sample, or measure "
            "the run (measure=True, a larger budget) so it keeps a CascadePool",
        )
        found = DEFAULT_CASCADE_SHARES[kind]
    embedding, small = (share.clip(0.0, 1.0) for share in found)
    if kind == TaskKind.SCORE:
        embedding = ZERO  # no embedding stage: a score's proxy would be its own answer
    if target.metric != "accuracy":
        small = ZERO  # recall and precision targets send what the embedding leaves to the large tier
    return embedding, small


def cascade_estimate(
    node: Node,
    path: str,
    context: EstimationContext,
    *,
    rows: Interval,
    rows_out: Interval,
    prompt: Interval,
    embedded: Interval,
    completion: Interval,
) -> CascadeEstimate:
    """Price ``node`` as a cascade over ``rows`` input rows (per row: ``prompt`` and ``completion``
    tokens for the LLM tiers, ``embedded`` tokens for the embedding tier)."""
    kind = cascade_kind(node)
    if kind is None:
        raise EstimateError(
            f"{node.label()} cannot run as a cascade (filters, classifications and scores can); "
            "price it on 'large' or 'small'"
        )
    target = _target(node)
    embedding, small = cascade_shares(node, kind, target, context)
    large = _complement(embedding + small)
    labels = rows.minimum(float(target.labels))
    rest = Interval(*(max(x - target.labels, 0.0) for x in (rows.value, rows.low, rows.high)))
    split = CascadeSplit(
        target=target,
        embedding_share=embedding,
        small_share=small,
        large_share=large,
        labels=labels,
        embedding_rows=ZERO if kind == TaskKind.SCORE else rows,
        small_rows=ZERO if target.metric != "accuracy" else rows,
        large_rows=labels + rest * large,
    )
    parts = [
        model_estimate(
            node,
            path,
            context,
            rows_in=rows,
            rows_out=rows_out,
            calls=calls,
            input_tokens=calls * tokens,
            output_tokens=ZERO if tier == EMBEDDING_TIER else calls * completion,
            tier=tier,
            quality=1.0,
        )
        for tier, calls, tokens in (
            (EMBEDDING_TIER, split.embedding_rows, embedded),
            (SMALL_TIER, split.small_rows, prompt),
            (context.top_tier, split.large_rows, prompt),
        )
        if calls.high > 0 or tier == context.top_tier
    ]
    profiles = {tier: context.profile(tier, node) for tier in (EMBEDDING_TIER, SMALL_TIER) if tier in context.profiles}
    wall = cascade_wall(
        {**profiles, context.top_tier: context.profile(context.top_tier, node)},
        rows=rows,
        labels=labels,
        embedding_rows=split.embedding_rows,
        small_rows=split.small_rows,
        large_rows=split.large_rows,
        prompt=prompt,
        embedded=embedded,
        completion=completion,
        top_tier=context.top_tier,
    )
    return CascadeEstimate(
        path,
        node.label(),
        CASCADE_TIER,
        rows,
        rows_out,
        total([part.input_tokens for part in parts]),
        total([part.output_tokens for part in parts]),
        total([part.dollars for part in parts]),
        total([part.gpu_seconds for part in parts]),
        Interval(*(max(x - STAGE_START_S, 0.0) for x in (wall.cascade.value, wall.cascade.low, wall.cascade.high))),
        cascade_quality(target.level, target.delta),
        cascade=split,
        wall=wall,
    )


def _target(node: Node) -> QualityTarget:
    found = node.cascades() if isinstance(node, Semantic) else None
    return found if found is not None else QualityTarget()


def _complement(share: Interval) -> Interval:
    """``1 - share`` clipped to [0, 1]."""
    return Interval(1.0 - share.value, 1.0 - share.high, 1.0 - share.low).clip(0.0, 1.0)
