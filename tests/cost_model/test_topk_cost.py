"""A top-k's model calls, priced as execution asks them (``cost_model/topk_rule.py``): the partial
quicksort's expected comparisons over its prefilter's candidates, each quoting two records. Against
a run's journal: ``tests/pipeline/test_set_ops_ray.py``."""

from __future__ import annotations

import random
import statistics

import pytest
from plans import PROFILES, SCAN

from semray.cost_model.estimates import Interval
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.statistics import PlanStatistics
from semray.cost_model.topk_rule import expected_comparisons, prefilter_rows
from semray.operators import Filter, Limit, SemTopK
from semray.operators.keys import statistics_key
from semray.pipeline.lowering.set_ops import lower_sem_topk
from semray.pipeline.workers.top_k import partial_quicksort
from semray.settings import Settings

URGENT = "the most urgent {review}"


@pytest.mark.parametrize(("rows", "k"), [(24, 3), (32, 8), (40, 10), (12, 12)])
def test_the_expected_comparisons_are_what_the_executors_quicksort_asks_on_average(rows: int, k: int) -> None:
    rng = random.Random(rows * 100 + k)
    asked = []
    for trial in range(300):
        order = list(range(rows))
        rng.shuffle(order)
        items = [(value, trial) for value in order]  # the pivots hash the items: vary them per trial
        top, count = partial_quicksort(items, k, lambda pairs: [a > b for a, b in pairs])
        assert [value for value, _ in top] == list(range(rows - 1, rows - 1 - k, -1))
        asked.append(count)
    assert statistics.mean(asked) == pytest.approx(expected_comparisons(rows, k), rel=0.06)


def test_the_prefilter_bounds_the_comparisons_and_lowering_keeps_as_many_candidates() -> None:
    assert expected_comparisons(2000, 5) == expected_comparisons(prefilter_rows(5), 5)
    assert expected_comparisons(10, 5) < expected_comparisons(10.5, 5) < expected_comparisons(11, 5)
    assert expected_comparisons(1, 3) == expected_comparisons(0, 3) == 0.0
    node = SemTopK(input=SCAN, instruction=URGENT, k=5)
    assert lower_sem_topk(node, (None,), Settings()).prefilter == prefilter_rows(5)  # type: ignore[arg-type]


def test_a_top_k_is_priced_by_its_comparisons_not_one_call_per_row() -> None:
    top = SemTopK(input=SCAN, instruction=URGENT, k=5, tier="large")
    measured = PlanStatistics(
        source_rows={"csv:reviews.csv": Interval.exact(2000)},
        tokens_per_row={statistics_key(top): Interval.exact(80)},
    )
    operator = estimate_plan(top, measured, PROFILES).operator("")
    compared = expected_comparisons(32, 5)  # 2,000 rows, 32 candidates kept by the prefilter
    assert operator.rows_in.value == pytest.approx(compared) and 70 < compared < 75
    (rows, _criterion) = operator.embeddings
    cells = rows.input_tokens.value / 2000  # the measured prompt less its fixed part: one record's tokens
    asked = operator.input_tokens.value - sum(part.input_tokens.value for part in operator.embeddings)
    per_comparison = asked / compared
    assert 2 * cells < per_comparison < 2 * cells + 80  # two records and the comparison prompt's own words
    assert operator.output_tokens.value == pytest.approx(compared)  # Yes or No


def test_fewer_rows_than_the_prefilter_compare_fewer_and_intervals_follow_the_rows() -> None:
    filtered = Filter(input=SCAN, predicate="rating >= 4")
    top = SemTopK(input=filtered, instruction=URGENT, k=3)
    rows = {"csv:reviews.csv": Interval.exact(30)}
    operator = estimate_plan(top, PlanStatistics(source_rows=rows), PROFILES).operator("")
    below = estimate_plan(filtered, PlanStatistics(source_rows=rows), PROFILES).rows
    bounds = (below.value, below.low, below.high)
    assert operator.rows_in == Interval(*(expected_comparisons(bound, 3) for bound in bounds))
    assert operator.rows_in.low <= operator.rows_in.value <= operator.rows_in.high < expected_comparisons(32, 3)


def test_a_limit_of_fewer_rows_prices_the_top_k_as_the_top_it_runs_as() -> None:
    """Lowering runs a top-10 under LIMIT 2 as a top-2 (``relational._ranked_only``); so is it priced."""
    rows = PlanStatistics(source_rows={"csv:reviews.csv": Interval.exact(2000)})
    ten = SemTopK(input=SCAN, instruction=URGENT, k=10)
    limited = estimate_plan(Limit(input=ten, count=1, offset=1), rows, PROFILES).operator("input")
    two = estimate_plan(SemTopK(input=SCAN, instruction=URGENT, k=2), rows, PROFILES).operator("")
    whole = estimate_plan(ten, rows, PROFILES).operator("")
    assert limited.rows_in.value == pytest.approx(two.rows_in.value)
    assert limited.rows_in.value < whole.rows_in.value * 0.7  # 32 candidates for 2 ranks, 40 for 10
    assert limited.input_tokens.value == pytest.approx(two.input_tokens.value)
    assert limited.dollars.value == pytest.approx(two.dollars.value)
    assert limited.embeddings == whole.embeddings  # every row is still embedded for the prefilter
    assert limited.rows_out.value == 2
    wide = estimate_plan(Limit(input=ten, count=10), rows, PROFILES).operator("input")
    assert wide.rows_in == whole.rows_in


def test_a_limit_over_a_chain_above_a_top_k_prices_only_the_ranks_the_chain_draws() -> None:
    """A LIMIT's rounds draw the top-k's ranks from above (``pipeline/ray/set_ops.ranks_in_rounds``):
    its prefilter keeps the candidates of k = 50, its quicksort sorts only the ranks drawn. LIMIT 3
    over a semantic filter draws 3 / 0.5 + 3 / 0.5 = 12 ranks; with a relational filter between,
    3 / (0.5 / 3) twice = 36. Every row is still embedded."""
    from semray.cost_model.limit_cost import drawn_rows
    from semray.operators import SemFilter
    from semray.planner.explain_estimates import render_estimates

    rows = PlanStatistics(source_rows={"csv:reviews.csv": Interval.exact(2000)})
    top = SemTopK(input=SCAN, instruction=URGENT, k=50)
    whole = estimate_plan(top, rows, PROFILES).operator("")
    billing = SemFilter(input=top, instruction="{review} is about billing")
    plan = Limit(input=billing, count=3)
    estimate = estimate_plan(plan, rows, PROFILES)
    ranked = estimate.operator("input.input")
    assert drawn_rows(3, 0.5, 0.5, 50) == 12
    assert ranked.rows_in.value == pytest.approx(expected_comparisons(2000, 50, ranks=12))
    assert ranked.rows_in.value < whole.rows_in.value * 0.65  # 200 candidates: 473 comparisons for 12 ranks, 756 for 50
    assert ranked.embeddings == whole.embeddings and ranked.rows_out.value == 12
    assert ranked.dollars.value < whole.dollars.value
    assert "the top-50 under it sorts only those 12 ranks" in render_estimates(plan, estimate)
    between = Limit(
        input=SemFilter(input=Filter(input=top, predicate="rating >= 4"), instruction="{review} is short"), count=3
    )
    drawn = estimate_plan(between, rows, PROFILES).operator("input.input.input").rows_in.value
    # 36 ranks, give or take the rounding of 3 / (0.5 x 1/3) up to 19, as lowering sizes the first round too
    assert expected_comparisons(2000, 50, ranks=36) <= drawn <= expected_comparisons(2000, 50, ranks=38)
    wide = Limit(input=billing, count=40)  # 80 + 80 rows drawn > 50 ranks: the whole top-k is read
    assert estimate_plan(wide, rows, PROFILES).operator("input.input").rows_in == whole.rows_in
