"""A factorized semantic join is priced as the side questions it asks, not as its pairs."""

from __future__ import annotations

import pytest
from plans import PROFILES, SCAN

from semray.cost_model.estimates import Interval, OperatorEstimate
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Scan, SemJoin
from semray.operators.keys import statistics_key

LEFT = Scan(source=SCAN.source, source_schema=SCAN.source_schema)
RIGHT = Scan(source=SCAN.source.model_copy(update={"path": "other.csv"}), source_schema=SCAN.source_schema)
ROWS = {"csv:reviews.csv": Interval.exact(100), "csv:other.csv": Interval.exact(50)}
SAME = "{l.review} and {r.review} have the same sentiment"


def join(**fields: object) -> SemJoin:
    return SemJoin.model_validate({"left": LEFT, "right": RIGHT, "instruction": SAME, **fields})


def estimate(node: SemJoin, tokens: float | None = None) -> OperatorEstimate:
    measured = {statistics_key(node): Interval.exact(tokens)} if tokens is not None else {}
    return estimate_plan(node, PlanStatistics(source_rows=ROWS, tokens_per_row=measured), PROFILES).operator("")


def test_a_factorized_join_costs_one_call_per_row_of_each_side() -> None:
    nested, factorized = estimate(join(implementation="nested")), estimate(join(implementation="factorized"))
    assert nested.rows_in.value == 100 * 50
    assert factorized.rows_in == Interval.exact(150)
    assert factorized.dollars.value < nested.dollars.value / 20
    # Both keep the same share of pairs: the factorization changes the work, not the answer.
    assert factorized.rows_out == nested.rows_out


def test_right_labels_classify_only_the_left_rows() -> None:
    labelled = join(implementation="factorized", labels=("positive", "negative"), right_labels=True)
    assert estimate(labelled).rows_in == Interval.exact(100)


def test_a_self_join_costs_one_call_per_row_of_its_one_relation() -> None:
    same = SemJoin.model_validate({"left": LEFT, "right": LEFT, "instruction": SAME, "implementation": "factorized"})
    assert estimate(same).rows_in == Interval.exact(100)
    pairwise = same.model_copy(update={"implementation": "nested"})
    assert estimate(pairwise).rows_in.value == 100 * 100  # judged pair by pair: every pair


@pytest.mark.parametrize(
    ("fields", "answer_tokens"),
    [
        ({"factor": "urgency", "relation": ">"}, 1.0),  # a score
        ({"factor": "sentiment", "labels": ("positive", "negative")}, 1.0),  # a one-token label
        ({"factor": "sentiment"}, 32.0),  # a free-text value (MAP_OUTPUT_TOKENS)
    ],
)
def test_each_side_answer_is_priced_by_its_kind(fields: dict[str, object], answer_tokens: float) -> None:
    priced = estimate(join(implementation="factorized", **fields), tokens=80.0)
    assert priced.output_tokens.value == pytest.approx(150 * answer_tokens)
    assert priced.input_tokens == Interval.exact(150 * 80.0)


def test_an_unmeasured_side_prompt_quotes_one_cell_not_two() -> None:
    nested, factorized = estimate(join(implementation="nested")), estimate(join(implementation="factorized"))
    per_pair = nested.input_tokens.value / 5000
    per_side = factorized.input_tokens.value / 150
    assert per_pair - per_side == pytest.approx(100.0)  # ASSUMED_CELL_TOKENS: one cell fewer
