"""A LIMIT's early stop, priced (``cost_model/limit_cost.py``): the chain under ``LIMIT k`` costs
about ``k / selectivity`` plus the first round of its input, a sort or aggregate in between
prices every row, a factorized join asks its right side whole, a self-join about ``sqrt(k / s)``
rows. Against executed calls: ``tests/pipeline/test_limit_estimate_ray.py``."""

from __future__ import annotations

import pytest
from plans import PROFILES, SCAN

from semray.cost_model.estimates import Interval
from semray.cost_model.limit_chain import limit_input
from semray.cost_model.limit_cost import drawn_rows
from semray.cost_model.plan_cost import NO_TIER, estimate_plan
from semray.cost_model.prices import TierProfile
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Limit, Scan, SemFilter, SemJoin, Sort
from semray.operators.base import Node
from semray.operators.keys import statistics_key
from semray.operators.quality_targets import QualityTarget
from semray.operators.relational import SortKey
from semray.planner.explain_estimates import render_estimates

OTHER = Scan(source=SCAN.source.model_copy(update={"path": "other.csv"}), source_schema=SCAN.source_schema)
ROWS = {"csv:reviews.csv": Interval.exact(2000), "csv:other.csv": Interval.exact(40)}
POSITIVE = SemFilter(input=SCAN, instruction="{review} is positive")


def calls(plan: Node, statistics: PlanStatistics | None = None) -> float:
    estimate = estimate_plan(plan, statistics or PlanStatistics(source_rows=ROWS), PROFILES)
    return sum(operator.rows_in.value for operator in estimate.operators if operator.tier != NO_TIER)


def test_a_filter_under_a_limit_asks_k_over_its_selectivity_plus_the_first_round() -> None:
    assert calls(POSITIVE) == 2000
    assert calls(Limit(input=POSITIVE, count=5)) == 5 / 0.5 + 5 / 0.5  # default selectivity 0.5
    measured = PlanStatistics(source_rows=ROWS, selectivity={statistics_key(POSITIVE): Interval.exact(0.1)})
    assert calls(Limit(input=POSITIVE, count=5), measured) == 5 / 0.1 + 5 / 0.5  # first round: lowering's default
    assert calls(Limit(input=POSITIVE, count=1500)) == 2000  # never more than the input


def test_a_chain_scales_each_operator_by_the_rows_it_sees() -> None:
    chain = SemFilter(input=POSITIVE, instruction="{review} is short")
    # 20 / 0.25 + 20 / 0.25 = 160 rows drawn; half reach the second filter.
    assert calls(Limit(input=chain, count=20)) == 160 + 80
    text = render_estimates(
        Limit(input=chain, count=20),
        estimate_plan(Limit(input=chain, count=20), PlanStatistics(source_rows=ROWS), PROFILES),
    )
    assert "LIMIT 20 stops early: the chain under it asks about 160 of 2,000 rows" in text


def test_joins_under_a_limit() -> None:
    same = "{l.review} and {r.review} have the same sentiment"
    nested = SemJoin(left=SCAN, right=OTHER, instruction=same, implementation="nested")
    assert calls(Limit(input=nested, count=5)) == 5 / 0.1 + 5 / 0.1  # pairs, at 0.1 of them
    factorized = nested.model_copy(update={"implementation": "factorized"})
    # The right side whole (40), left rows at 0.1 x 40 pairs each: 5 / 4 -> 2, twice.
    assert calls(Limit(input=factorized, count=5)) == 40 + 2 + 2
    self_join = SemJoin(left=OTHER, right=OTHER, instruction=same, implementation="factorized")
    assert calls(self_join) == 40
    assert calls(Limit(input=self_join, count=5)) == pytest.approx(2 * 8, abs=1)  # sqrt(5 / 0.1) rows, twice


def test_what_reads_every_row_first_is_not_discounted() -> None:
    assert calls(Limit(input=Sort(input=POSITIVE, keys=(SortKey(column="review"),)), count=5)) == 2000
    assert drawn_rows(5, 0.5, 0.5, 8) == 8


def test_a_cascade_under_a_small_limit_is_priced_on_the_large_tier_it_runs_on() -> None:
    """Lowering puts a cascade the LIMIT needs fewer rows of than its calibration labels on the
    large tier (``cost_model/limit_chain.limit_input``); the estimate prices that same plan: the
    large tier's calls and dollars, not the cascade's proxies, calibration and small tier."""
    embedding = TierProfile("embedding", 0.0, 0.0, 0.0, float("inf"), 8)
    profiles = {**PROFILES, "embedding": embedding}
    cascade = SemFilter(input=SCAN, instruction="{review} is positive", quality=QualityTarget(level=0.9))
    statistics = PlanStatistics(source_rows=ROWS)
    small_limit = estimate_plan(Limit(input=cascade, count=5), statistics, profiles)
    (priced,) = (operator for operator in small_limit.operators if operator.tier != NO_TIER)
    on_large = estimate_plan(Limit(input=POSITIVE, count=5), statistics, profiles)
    (large,) = (operator for operator in on_large.operators if operator.tier != NO_TIER)
    assert priced.tier == "large" and priced.rows_in.value == 5 / 0.5 + 5 / 0.5
    assert priced.dollars == large.dollars and small_limit.dollars == on_large.dollars
    # The lowered plan runs the same tier: the rule is one function.
    assert limit_input(Limit(input=cascade, count=5)).tier == "large"
    # A LIMIT needing more rows than the 200 calibration labels keeps (and prices) the cascade.
    wide = estimate_plan(Limit(input=cascade, count=150), statistics, profiles)
    assert {operator.tier for operator in wide.operators} >= {"cascade"}
    assert limit_input(Limit(input=cascade, count=150)) == cascade
