"""EXPLAIN with estimates, and actuals beside them after a run."""

from __future__ import annotations

import pyarrow as pa
from planner_costs import estimator
from planner_reference import memory_scan

from semray.operators import Filter, SemFilter, SemMap
from semray.planner.explain_estimates import Actual, actuals_by_path, render_estimates
from semray.planner.model_selection import apply_tiers

TABLE = pa.table({"review": ["a", "b"], "rating": [1, 5]})


def plan():  # type: ignore[no-untyped-def]
    scan = memory_scan("reviews", TABLE)
    kept = SemFilter(input=Filter(input=scan, predicate="rating > 2"), instruction="{review} mentions delivery")
    return apply_tiers(SemMap(input=kept, instruction="summary of {review}", output="summary"), {"input": "small"})


def test_every_operator_shows_its_estimates_and_semantic_ones_their_tier() -> None:
    text = render_estimates(plan(), estimator()(plan(), None))
    lines = text.splitlines()
    assert lines[0].startswith("SemMap") and "rows " in lines[0] and "tokens " in lines[0] and "large" in lines[0]
    assert lines[1].startswith("└─ SemFilter [small]") and "small (quality" in lines[1]
    assert "[" in lines[2] and "Filter rating > 2" in lines[2] and "tokens" not in lines[2]
    assert "Scan memory:reviews" in lines[3]
    assert lines[-1].startswith("Estimated total: rows") and "quality >= " in lines[-1]


def test_actuals_appear_under_their_operator() -> None:
    actuals = {"input": Actual(rows=310, calls=1000, input_tokens=31_900, output_tokens=1000, dollars=0.0119)}
    lines = render_estimates(plan(), estimator()(plan(), None), actuals).splitlines()
    assert lines[2].strip().startswith("│  actual: rows 310 · calls 1.0k · tokens 31.9k in / 1.0k out · $0.0119")
    assert lines[-1] == "Actual total: 1000 model calls · $0.0119"


def test_actuals_are_matched_to_paths_by_the_engine_key() -> None:
    class Usage:
        calls, tokens_in, tokens_out, dollars = 4, 40, 4, 0.5

    found = actuals_by_path(plan(), {"SemFilter": Usage()}, lambda node: type(node).__name__)
    assert list(found) == ["input"] and (found["input"].calls, found["input"].input_tokens) == (4, 40)
