"""Intervals, statistics keys and policies."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from plans import PLAN, POSITIVE, RATED, SCAN

from semray.cost_model.estimates import EstimateError, Interval, PlanEstimate
from semray.cost_model.policies import MaxQuality, MinCost, MinLatency
from semray.cost_model.sampling import Estimate
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Scan, SemFilter, SourceSpec
from semray.operators.keys import source_key, statistics_key


def test_interval_checks_its_order_and_is_frozen() -> None:
    with pytest.raises(EstimateError, match="low <= value <= high"):
        Interval(2.0, 3.0, 4.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Interval.exact(1.0).value = 2.0  # type: ignore[misc]


def test_interval_arithmetic_spans_every_choice_of_operands() -> None:
    product = Interval(10.0, 8.0, 12.0) * Interval(0.5, 0.25, 1.0)
    assert product == Interval(5.0, 2.0, 12.0)
    assert Interval(1.0, 0.0, 2.0) + Interval.exact(3.0) == Interval(4.0, 3.0, 5.0)
    assert Interval(100.0, 50.0, 150.0).minimum(80.0) == Interval(80.0, 50.0, 80.0)
    assert Interval(-1.0, -2.0, 1.0) * Interval(1.0, -1.0, 2.0) == Interval(-1.0, -4.0, 2.0)


def test_an_estimate_beyond_its_interval_is_clipped_into_it() -> None:
    estimate = Estimate(1.08, 0.7, 1.0, 0.95, 50, "importance-hansen-hurwitz-wilson")
    assert Interval.from_estimate(estimate) == Interval(1.0, 0.7, 1.0)


def test_statistics_key_ignores_position_and_tier_but_not_the_question() -> None:
    elsewhere = SemFilter(input=SCAN, instruction=POSITIVE.instruction, tier="large")
    assert statistics_key(elsewhere) == statistics_key(POSITIVE)
    assert statistics_key(SemFilter(input=SCAN, instruction="{review} is negative")) != statistics_key(POSITIVE)
    assert statistics_key(RATED) != statistics_key(POSITIVE)
    assert statistics_key(PLAN) == statistics_key(PLAN.model_copy())


def test_source_key_of_a_memory_table_is_its_digest_ref() -> None:
    memory = Scan(
        source=SourceSpec(kind="memory", options={"ref": "t@abc", "name": "t"}), source_schema=SCAN.source_schema
    )
    assert source_key(memory) == "memory:t@abc" and source_key(SCAN) == "csv:reviews.csv"


def test_plan_statistics_are_read_only_and_merge() -> None:
    first = PlanStatistics(source_rows={"a": Interval.exact(1)})
    with pytest.raises(TypeError):
        first.source_rows["b"] = Interval.exact(2)  # type: ignore[index]
    merged = first.merged(PlanStatistics(source_rows={"a": Interval.exact(3), "b": Interval.exact(2)}))
    assert dict(merged.source_rows) == {"a": Interval.exact(3), "b": Interval.exact(2)}


def _plan(dollars: float, quality: float, latency: float) -> PlanEstimate:
    zero = Interval.exact(0.0)
    return PlanEstimate(
        (), Interval.exact(1.0), Interval(dollars, dollars * 0.5, dollars * 2), zero, Interval.exact(latency), quality
    )


PLANS = [_plan(5.0, 0.99, 10.0), _plan(1.0, 0.80, 50.0), _plan(2.0, 0.95, 30.0), _plan(3.0, 0.95, 5.0)]


def test_min_cost_puts_the_cheapest_feasible_plan_first_and_infeasible_last() -> None:
    assert MinCost().rank(PLANS) == [2, 3, 0, 1]
    assert MinCost(quality=0.999).rank(PLANS) == [0, 2, 3, 1]  # all infeasible: best quality first
    assert not MinCost().feasible(PLANS[1])


def test_max_quality_fits_the_budget_optionally_on_the_upper_end() -> None:
    assert MaxQuality(budget_dollars=3.0).rank(PLANS) == [2, 3, 1, 0]
    assert MaxQuality(budget_dollars=3.0, use_upper=True).rank(PLANS) == [1, 2, 3, 0]


def test_min_latency_among_plans_of_enough_quality() -> None:
    assert MinLatency(quality=0.9).rank(PLANS) == [3, 0, 2, 1]
    with pytest.raises(EstimateError, match="quality target"):
        MinLatency(quality=1.5)


@given(
    st.lists(st.floats(-1e6, 1e6), min_size=3, max_size=3),
    st.lists(st.floats(-1e6, 1e6), min_size=3, max_size=3),
    st.floats(0, 1),
    st.floats(0, 1),
)
def test_interval_products_and_sums_contain_every_choice_of_operands(
    a: list[float], b: list[float], u: float, v: float
) -> None:
    left, right = Interval(*_ordered(a)), Interval(*_ordered(b))
    # Clamped: low + u * (high - low) can round past high, and the product then leaves the hull by
    # that rounding times the other operand, far more than a relative slack of the product itself.
    x = min(max(left.low + u * (left.high - left.low), left.low), left.high)
    y = min(max(right.low + v * (right.high - right.low), right.low), right.high)
    product, total = left * right, left + right
    slack = 1e-6 * max(1.0, abs(x * y))
    assert product.low - slack <= x * y <= product.high + slack
    assert total.low - 1e-6 <= x + y <= total.high + 1e-6


def _ordered(values: list[float]) -> tuple[float, float, float]:
    low, value, high = sorted(values)
    return value, low, high
