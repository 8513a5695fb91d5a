"""SemCode's estimate: generation and validation calls priced on the large tier; execution free of model cost."""

from __future__ import annotations

from semray.cost_model.estimates import Interval, OperatorEstimate
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.prices import TierProfile
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Scan, Schema, SourceSpec
from semray.operators.code import SemCode
from semray.operators.semantic import ExtractField

LARGE = TierProfile("large", 2.5, 10.0, 0.0, float("inf"), 8)
CODE = "def transform(batch):\n    return batch\n"


def plan(**overrides: object) -> SemCode:
    scan = Scan(source=SourceSpec(kind="csv", path="d.csv"), source_schema=Schema.of(("raw", "VARCHAR")))
    fields: dict[str, object] = {
        "input": scan,
        "instruction": "Parse {raw}",
        "inputs": ("raw",),
        "outputs": (ExtractField(name="day", type="date"),),
    }
    return SemCode(**{**fields, **overrides})  # type: ignore[arg-type]


def estimate(node: SemCode, rows: float) -> OperatorEstimate:
    statistics = PlanStatistics(source_rows={"csv:d.csv": Interval.exact(rows)})
    return estimate_plan(node, statistics, {"large": LARGE}).operator("")


def test_generation_is_priced_once_whatever_the_input_size() -> None:
    small, large = estimate(plan(), 1_000), estimate(plan(), 1_000_000)
    assert small.tier == "large" and small.dollars.value > 0
    assert small.dollars == large.dollars and large.rows_out.value == 1_000_000
    assert small.dollars.high > small.dollars.value  # up to two retries


def test_no_per_row_answers_costs_less() -> None:
    checked, unchecked = estimate(plan(), 1_000), estimate(plan(min_agreement=None), 1_000)
    assert unchecked.dollars.value < checked.dollars.value


def test_committed_code_costs_no_model_call() -> None:
    committed = estimate(plan(code=CODE), 1_000)
    assert committed.tier == "none" and committed.dollars.high == 0.0
    assert "CPU only" in committed.label
