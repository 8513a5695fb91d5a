"""optimize() through the real cost model (estimate_plan, MinCost): statistics drive rule 5,
the quality bound limits downgrades, and EXPLAIN renders the cost model's estimates."""

from __future__ import annotations

import math

import pyarrow as pa
from planner_reference import memory_scan

from semray.cost_model.estimates import Interval
from semray.cost_model.policies import MaxQuality, MinCost
from semray.cost_model.prices import TierProfile
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Limit, Node, SemFilter, SemMap, walk
from semray.operators.keys import source_key, statistics_key
from semray.planner import optimize, optimize_plan
from semray.planner.explain_estimates import render_estimates

TABLE = pa.table({"review": ["a", "b"], "rating": [1, 5]})
PROFILES = {
    "large": TierProfile("large", 2.5, 10.0, 0.0, math.inf, 8),
    "small": TierProfile("small", 0.15, 0.6, 0.0, math.inf, 8),
}


def plan() -> Node:
    scan = memory_scan("reviews", TABLE)
    delivery = SemFilter(input=scan, instruction="{review} mentions delivery")
    refund = SemFilter(input=delivery, instruction="{review} mentions a refund")
    return Limit(input=SemMap(input=refund, instruction="summary of {review}", output="summary"), count=5)


def statistics(small_quality: float) -> PlanStatistics:
    nodes = {node.instruction: node for node in walk(plan()) if isinstance(node, SemFilter | SemMap)}
    scan = next(node for node in walk(plan()) if not node.children)
    return PlanStatistics(
        source_rows={source_key(scan): Interval.exact(10_000)},  # type: ignore[arg-type]
        selectivity={
            statistics_key(nodes["{review} mentions delivery"]): Interval(0.9, 0.85, 0.95),
            statistics_key(nodes["{review} mentions a refund"]): Interval(0.05, 0.03, 0.07),
        },
        tokens_per_row={statistics_key(node): Interval.exact(200) for node in nodes.values()},
        default_tier_quality={"small": small_quality},
    )


def filters(node: Node) -> list[str]:
    return [n.instruction for n in walk(node) if isinstance(n, SemFilter)]


def test_measured_selectivities_put_the_selective_filter_first() -> None:
    optimized = optimize(plan(), statistics(0.97), PROFILES, MinCost(quality=0.9))
    assert filters(optimized) == ["{review} mentions delivery", "{review} mentions a refund"]  # top first
    assert isinstance(optimized, SemMap) and isinstance(optimized.input, Limit)  # LIMIT sank below the map


def test_quality_bound_limits_downgrades() -> None:
    # Union bound: three operators at 0.97 give 0.91; at 0.955 two give 0.91, three 0.865.
    loose = optimize(plan(), statistics(0.97), PROFILES, MinCost(quality=0.9))
    assert {getattr(n, "tier", None) for n in walk(loose) if n.calls_llm} == {"small"}
    tight = optimize(plan(), statistics(0.955), PROFILES, MinCost(quality=0.9))
    tiers = sorted(n.tier for n in walk(tight) if isinstance(n, SemFilter | SemMap))
    assert tiers == ["large", "small", "small"]


def test_uncalibrated_small_tier_keeps_everything_large() -> None:
    stats = PlanStatistics(source_rows=statistics(0.97).source_rows)
    optimized = optimize(plan(), stats, PROFILES, MinCost(quality=0.9))
    assert {n.tier for n in walk(optimized) if isinstance(n, SemFilter | SemMap)} == {"large"}


def test_max_quality_keeps_large_within_budget() -> None:
    result = optimize_plan(plan(), statistics(0.97), PROFILES, MaxQuality(budget_dollars=1e6))
    assert result.selection is not None and not result.selection.steps


def test_explain_renders_the_cost_model_estimate() -> None:
    result = optimize_plan(plan(), statistics(0.97), PROFILES, MinCost(quality=0.9))
    assert result.estimate is not None
    text = render_estimates(result.plan, result.estimate)
    assert "small (quality 0.970)" in text and text.splitlines()[-1].startswith("Estimated total")
