"""The estimation benchmark's cost check at a tiny size: estimate_plan's dollars near the counted ones."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.estimation import summarise  # noqa: E402
from benchmarks.estimation_cost import generated_cost  # noqa: E402


def test_generated_cost_estimate_is_close_to_the_counted_cost() -> None:
    cost = generated_cost(size=1000, labels=40, seeds=2)
    assert cost["actual_dollars"] > 0 and len(cost["trials"]) == 2
    assert cost["mean_abs_relative_error"] < 0.5
    assert all(trial["low"] <= trial["estimated_dollars"] <= trial["high"] for trial in cost["trials"])


def test_summary_groups_predicates_by_population_and_budget() -> None:
    rows = [
        {
            "predicate": "medical:a",
            "labels": 25,
            "mse_ratio": 2.0,
            "rmse_importance": 0.1,
            "rmse_uniform": 0.2,
            "coverage_importance": 0.95,
            "coverage_uniform": 0.94,
        },
        {
            "predicate": "generated:b",
            "labels": 25,
            "mse_ratio": 8.0,
            "rmse_importance": 0.1,
            "rmse_uniform": 0.3,
            "coverage_importance": 0.93,
            "coverage_uniform": 0.9,
        },
    ]
    (medical, generated, everything) = summarise(rows, [25])
    assert (medical["count"], generated["count"], everything["count"]) == (1, 1, 2)
    assert everything["geometric_mse_ratio"] == 4.0 and everything["at_least_2x"] == 2
