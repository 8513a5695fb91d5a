"""Plan cost: rows, tokens, dollars, GPU-seconds, latency and quality of every operator of a plan.

`estimate_plan` walks the plan bottom-up. Each operator type has one registered estimator
(`ESTIMATORS`, filled by `relational_cost` and `semantic_cost`) that turns its inputs' row
intervals into an `OperatorEstimate`; its output rows are the operator's row rule
(`semray.cost_model.cardinality.estimated_rows`, where the defaults are). Formulas
(docs/cost_model.md has them all):

* a semantic operator on tier ``t`` with ``n`` calls, ``p`` prompt tokens and ``c`` completion
  tokens per call: ``dollars = n * (p * fee_in + c * fee_out) / 1e6 + gpu_s * gpu_hour / 3600``,
  ``gpu_s = n * (p + c) / 1000 * gpu_seconds_per_1k_tokens``,
  ``latency = (n * latency_per_call + n * (p + c) / tokens_per_s) / concurrency``;
* the semantic chain directly under a LIMIT is priced at the rows its round trips draw
  (`semray.cost_model.limit_cost`: about ``k / selectivity`` plus the first round), on the tiers
  it runs on (`semray.cost_model.limit_chain.limit_input`: a cascade under a small LIMIT runs on
  the large tier);
* plan dollars, GPU-seconds and latency are sums over operators (latency ignores the overlap
  of streaming stages, so it is an upper figure); plan quality is
  `semray.cost_model.quality.plan_quality` over the semantic operators.

Tiers: ``tiers`` maps an operator path to a tier name and overrides the node's own tier;
otherwise the tier it runs on (`SemanticNode.resolved_tier`), with ``auto`` priced as the large
tier (what execution runs without a quality target). A node that cascades (``tier="cascade"``,
or ``auto`` with a quality target) is priced on the ``"cascade"`` tier
(`semray.cost_model.cascade_cost`); an operator that cannot cascade (a SemJoin with
``tier="cascade"``, a target that cannot be certified) runs, and is priced, on the large tier.
Paths: ``""`` is the root, then child field names joined by dots (``"input.input"``,
``"left"``, ``"inputs.1"``), the field paths of `semray.operators.plan_paths`.

>>> from semray.operators import Scan, SemFilter, Schema, SourceSpec
>>> from semray.cost_model.prices import TierProfile
>>> scan = Scan(source=SourceSpec(kind="csv", path="r.csv"), source_schema=Schema.of(("review", "VARCHAR")))
>>> plan = SemFilter(input=scan, instruction="{review} is positive")
>>> key = statistics_key(plan)
>>> stats = PlanStatistics(source_rows={"csv:r.csv": Interval.exact(1000)},
...     selectivity={key: Interval(0.2, 0.15, 0.25)}, tokens_per_row={key: Interval.exact(100)})
>>> large = TierProfile("large", 2.5, 10.0, 0.0, float("inf"), 8)
>>> estimate = estimate_plan(plan, stats, {"large": large})
>>> (estimate.rows.value, round(estimate.dollars.value, 4), estimate.quality)
(200.0, 0.26, 1.0)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from semray.cost_model.estimates import ZERO, EstimateError, Interval, OperatorEstimate, PlanEstimate, total
from semray.cost_model.prices import TierProfile
from semray.cost_model.quality import plan_quality
from semray.cost_model.statistics import PlanStatistics
from semray.operators.base import Node
from semray.operators.keys import statistics_key
from semray.operators.plan_paths import child_paths
from semray.operators.semantic import SemanticNode

TOP_TIER = "large"
NO_TIER = "none"
CASCADE_TIER = "cascade"


class MissingStatisticsError(EstimateError):
    """A figure the estimate needs was never measured."""


UNMEASURED_TIER_QUALITY = 0.0
"""A cheaper tier nobody calibrated guarantees nothing, so a quality target keeps the top tier."""


@dataclass(frozen=True, slots=True)
class EstimationContext:
    """What every estimator reads: the statistics, tier profiles and the tier assignment.

    With ``strict`` a missing measurement raises `MissingStatisticsError`; otherwise the
    documented default is used and its name noted in ``assumed`` (scratch, one operator at a
    time), which ends up in `OperatorEstimate.assumed`.
    """

    statistics: PlanStatistics
    profiles: Mapping[str, TierProfile]
    tiers: Mapping[str, str]
    top_tier: str = TOP_TIER
    strict: bool = False
    assumed: list[str] = field(default_factory=list)

    def missing(self, what: str, message: str) -> None:
        """Raise (strict) or note that ``what`` was assumed."""
        if self.strict:
            raise MissingStatisticsError(message)
        self.assumed.append(what)

    def tier_of(self, node: Node, path: str) -> str:
        """The tier ``node`` is priced on: ``tiers[path]``, else the tier it runs on
        (``SemanticNode.resolved_tier``: ``"cascade"`` when it cascades; ``auto``, and ``cascade``
        on an operator that cannot, run on the large tier); the top tier for any other node."""
        if path in self.tiers:
            return self.tiers[path]
        return node.resolved_tier() if isinstance(node, SemanticNode) else self.top_tier

    def profile(self, tier: str, node: Node) -> TierProfile:
        if tier not in self.profiles:
            raise MissingStatisticsError(
                f"no price profile for tier {tier!r} (needed by {node.label()}); profiles: {sorted(self.profiles)}"
            )
        return self.profiles[tier]

    def selectivity(self, node: Node, default: Interval) -> Interval:
        """``node``'s measured selectivity, else ``default`` (the row rules' defaults:
        `semray.cost_model.cardinality`), noted as assumed."""
        key = statistics_key(node)
        if key in self.statistics.selectivity:
            return self.statistics.selectivity[key]
        how = "measure_statistics" if node.calls_llm else "semray.cost_model.relational.filter_selectivity"
        self.missing("selectivity", f"no selectivity measured for {node.label()} (key {key}); measure it with {how}")
        return default

    def quality(self, node: Node, tier: str) -> float:
        if tier == self.top_tier:
            return 1.0
        key = statistics_key(node)
        found = self.statistics.tier_quality.get((key, tier))
        if found is None:
            found = self.statistics.default_tier_quality.get(tier)
        if found is None:
            self.missing(
                "tier_quality",
                f"no quality of tier {tier!r} measured for {node.label()} (key {key}); calibrate it with "
                "measure_statistics(tier_labellers=...) or give PlanStatistics.default_tier_quality",
            )
            return UNMEASURED_TIER_QUALITY
        return found


Estimator = Callable[[Node, str, tuple[Interval, ...], EstimationContext], OperatorEstimate]
ESTIMATORS: dict[type[Node], Estimator] = {}
"""Operator type -> its estimator; every logical operator has one (tests check it)."""


def register(*types: type[Node]) -> Callable[[Estimator], Estimator]:
    """Register ``estimator`` for operator ``types``."""

    def decorate(estimator: Estimator) -> Estimator:
        for kind in types:
            ESTIMATORS[kind] = estimator
        return estimator

    return decorate


def estimate_plan(
    plan: Node,
    statistics: PlanStatistics,
    profiles: Mapping[str, TierProfile],
    tiers: Mapping[str, str] | None = None,
    *,
    top_tier: str = TOP_TIER,
    strict: bool = False,
) -> PlanEstimate:
    """Estimate every operator of ``plan`` (children before parents) and the plan's totals.

    A figure never measured takes its documented default (noted in ``OperatorEstimate.assumed``)
    or, with ``strict=True``, raises `MissingStatisticsError` saying what to measure.
    """
    _load_estimators()
    # imports cardinality, which imports this module
    from semray.cost_model.limit_chain import limits_as_run
    from semray.cost_model.limit_cost import limit_stops

    plan = limits_as_run(plan)  # a cascade under a small LIMIT runs (and is priced) on the large tier
    context = EstimationContext(statistics, profiles, dict(tiers or {}), top_tier, strict)
    operators: list[OperatorEstimate] = []
    rows = _estimate(plan, "", context, operators)

    stopped = limit_stops(plan, operators)  # a LIMIT's rounds ask only what it needs
    semantic = [op.quality for op in stopped if op.tier != NO_TIER]
    return PlanEstimate(
        operators=stopped,
        rows=rows,
        dollars=total([op.dollars for op in stopped]),
        gpu_seconds=total([op.gpu_seconds for op in stopped]),
        latency_s=total([op.latency_s for op in stopped]),
        quality=plan_quality(semantic),
    )


def _estimate(node: Node, path: str, context: EstimationContext, out: list[OperatorEstimate]) -> Interval:
    inputs = tuple(_estimate(child, child_path, context, out) for child_path, child in child_paths(node, path))
    estimator = ESTIMATORS.get(type(node))
    if estimator is None:
        raise EstimateError(f"no cost estimator for {type(node).__name__}; register one in semray.cost_model")
    context.assumed.clear()
    estimate = estimator(node, path, inputs, context)
    if context.assumed:
        estimate = replace(estimate, assumed=tuple(dict.fromkeys(context.assumed)))
    out.append(estimate)
    return estimate.rows_out


def relational_estimate(node: Node, path: str, rows_in: Interval, rows_out: Interval) -> OperatorEstimate:
    """An operator that calls no model: rows only, no tokens, dollars or model time."""
    return OperatorEstimate(path, node.label(), NO_TIER, rows_in, rows_out, ZERO, ZERO, ZERO, ZERO, ZERO, 1.0)


def model_estimate(
    node: Node,
    path: str,
    context: EstimationContext,
    *,
    rows_in: Interval,
    rows_out: Interval,
    calls: Interval,
    input_tokens: Interval,
    output_tokens: Interval,
    tier: str,
    quality: float,
) -> OperatorEstimate:
    """Price ``calls`` model calls that send ``input_tokens`` and receive ``output_tokens`` in all."""
    profile = context.profile(tier, node)
    tokens = input_tokens + output_tokens
    gpu_seconds = tokens.scale(profile.gpu_seconds_per_1k_tokens / 1000.0)
    dollars = (
        input_tokens.scale(profile.fee_in_per_m / 1e6)
        + output_tokens.scale(profile.fee_out_per_m / 1e6)
        + gpu_seconds.scale(profile.gpu_hour / 3600.0)
    )
    return OperatorEstimate(
        path,
        node.label(),
        tier,
        rows_in,
        rows_out,
        input_tokens,
        output_tokens,
        dollars,
        gpu_seconds,
        profile.seconds(calls, tokens),
        quality,
    )


def _load_estimators() -> None:
    # The estimator modules register themselves on import; imported here to avoid an import cycle.
    from semray.cost_model import code_cost, relational_cost, semantic_cost  # noqa: F401
