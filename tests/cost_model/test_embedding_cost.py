"""What a blocked join judges and embeds, and what a top-k embeds, priced
(``cost_model/embedding_cost.py``): one call per text on the embedding tier, its own line in
EXPLAIN, in the operator's tokens and dollars (so in the plan's total that ``--max-cost`` reads),
and not scaled by a LIMIT's early stop. Against a run's ``Result.usage``:
``tests/pipeline/test_set_ops_ray.py``."""

from __future__ import annotations

import pytest
from plans import PROFILES, SCAN

from semray.cost_model.estimates import Interval
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.prices import TierProfile
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Limit, Scan, SemJoin, SemTopK
from semray.operators.keys import statistics_key
from semray.planner.explain_estimates import render_estimates

OTHER = Scan(source=SCAN.source.model_copy(update={"path": "other.csv"}), source_schema=SCAN.source_schema)
ROWS = {"csv:reviews.csv": Interval.exact(2000), "csv:other.csv": Interval.exact(40)}
PRICED = {**PROFILES, "embedding": TierProfile("embedding", 0.02, 0.0, 0.0, float("inf"), 8)}
SAME = "{l.review} and {r.review} have the same sentiment"


def estimate(plan: SemJoin | SemTopK | Limit) -> object:
    return estimate_plan(plan, PlanStatistics(source_rows=ROWS), PRICED)


def test_a_blocked_join_prices_both_sides_embedded_on_their_own_lines() -> None:
    blocked = SemJoin(left=SCAN, right=OTHER, instruction=SAME, implementation="blocked")
    result = estimate_plan(blocked, PlanStatistics(source_rows=ROWS), PRICED)
    join = result.operator("")
    left, right = join.embeddings
    assert (left.what, left.calls.value, right.what, right.calls.value) == ("left side", 2000, "right side", 40)
    # Unmeasured: 100 tokens for the one cell each side reads, at $0.02 per million.
    assert left.input_tokens.value == 2000 * 100 and left.dollars.value == 2000 * 100 * 0.02 / 1e6
    nested = estimate_plan(
        blocked.model_copy(update={"implementation": "nested"}), PlanStatistics(source_rows=ROWS), PRICED
    )
    assert nested.operator("").embeddings == ()
    # The pairs judged: 26 candidates per left row (block_size(40) = ceil(4 sqrt 40)), not all 40.
    assert (join.rows_in.value, nested.operator("").rows_in.value) == (2000 * 26, 2000 * 40)
    judged = nested.operator("").dollars.value * 26 / 40
    assert join.dollars.value == pytest.approx(judged + left.dollars.value + right.dollars.value)
    assert result.dollars.value == join.dollars.value  # in the plan's total, which --max-cost reads
    text = render_estimates(blocked, result)
    assert "embeds the left side: 2.0k texts · 200.0k tokens · $0.0040" in text
    assert "embeds the right side: 40 texts · 4.0k tokens · $0.0001" in text
    # auto: blocked above 20,000 pairs (the rule lowering follows), nested at or below.
    auto = blocked.model_copy(update={"implementation": "auto"})
    assert len(estimate_plan(auto, PlanStatistics(source_rows=ROWS), PRICED).operator("").embeddings) == 2
    few = {**ROWS, "csv:reviews.csv": Interval.exact(500)}
    assert estimate_plan(auto, PlanStatistics(source_rows=few), PRICED).operator("").embeddings == ()


def test_a_limit_scales_the_pairs_judged_not_the_sides_embedded() -> None:
    blocked = SemJoin(left=SCAN, right=OTHER, instruction=SAME, implementation="blocked")
    whole = estimate_plan(blocked, PlanStatistics(source_rows=ROWS), PRICED).operator("")
    limited = estimate_plan(Limit(input=blocked, count=5), PlanStatistics(source_rows=ROWS), PRICED).operator("input")
    embedded = sum(part.dollars.value for part in whole.embeddings)
    assert limited.rows_in.value < whole.rows_in.value / 100  # the pairs: 100 of 80,000
    assert limited.embeddings == whole.embeddings
    assert limited.dollars.value >= embedded > 0


def test_a_top_k_prices_its_rows_and_its_criterion_embedded() -> None:
    top = SemTopK(input=SCAN, instruction="the most urgent {review}", k=5)
    result = estimate_plan(top, PlanStatistics(source_rows=ROWS), PRICED)
    rows, criterion = result.operator("").embeddings
    assert (rows.what, rows.calls.value, criterion.what, criterion.calls.value) == ("rows", 2000, "criterion", 1)
    assert 1 <= criterion.input_tokens.value <= 10  # 'the most urgent the review'
    text = render_estimates(top, result)
    assert "embeds the rows: 2.0k texts" in text and "embeds the criterion: 1 text · " in text


def test_a_blocked_join_keeps_a_share_of_the_pairs_it_judges_not_of_every_pair() -> None:
    """A blocked join can only output candidates it judged: 0.5 of its 2,000 x 26 pairs, never the
    0.5 x 2,000 x 40 of every pair (the old figure, more than the 52,000 pairs it judges at 0.7)."""
    blocked = SemJoin(left=SCAN, right=OTHER, instruction=SAME, implementation="blocked")
    for share in (0.5, 0.7, 1.0):
        measured = PlanStatistics(source_rows=ROWS, selectivity={statistics_key(blocked): Interval.exact(share)})
        join = estimate_plan(blocked, measured, PRICED).operator("")
        assert join.rows_in.value == 2000 * 26
        assert join.rows_out.value == pytest.approx(2000 * 26 * share) and join.rows_out.high <= join.rows_in.high
    nested = blocked.model_copy(update={"implementation": "nested"})
    assert estimate(nested).operator("").rows_out.value == pytest.approx(2000 * 40 * 0.1)  # nested: every pair judged


def test_a_blocked_join_of_one_relation_prices_its_rows_embedded_once() -> None:
    """Both sides the same rows through the same cell: their texts are the same, embedded once (one
    line); a join of another table, or of another column, embeds both sides."""
    one = SemJoin(left=OTHER, right=OTHER, instruction=SAME, implementation="blocked")
    (rows,) = estimate(one).operator("").embeddings
    assert (rows.what, rows.calls.value, rows.input_tokens.value) == ("rows of both sides", 40, 40 * 100)
    other = SemJoin(left=OTHER, right=SCAN, instruction=SAME, implementation="blocked")
    assert [part.calls.value for part in estimate(other).operator("").embeddings] == [40, 2000]
