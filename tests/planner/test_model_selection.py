"""Model selection with a hand-written cost model: greedy downgrades under the quality bound,
compared with exhaustive enumeration; policies pick among the visited plans."""

from __future__ import annotations

import pyarrow as pa
import pytest
from planner_costs import MaxQuality, MinCost, estimator, exhaustive
from planner_reference import memory_scan

from semray.operators import Node, SemClassify, SemFilter, SemMap
from semray.planner.model_selection import apply_tiers, choosable_paths, select_models
from semray.planner.optimize import optimize_plan

TABLE = pa.table({"text": ["a", "b"], "n": [1, 2]})


def chain(pinned: str = "auto") -> Node:
    scan = memory_scan("t", TABLE)
    first = SemFilter(input=scan, instruction="{text} is cheap to get wrong")
    second = SemMap(input=first, instruction="summary of {text}", output="summary", tier=pinned)  # type: ignore[arg-type]
    return SemClassify(input=second, instruction="topic of {text}", labels=("a", "b"), output="topic")


def test_every_auto_operator_is_choosable_and_pinned_ones_are_not() -> None:
    assert choosable_paths(chain()) == ["", "input", "input.input"]
    assert choosable_paths(chain(pinned="large")) == ["", "input.input"]


def test_downgrades_while_the_quality_bound_holds() -> None:
    # small loses 3% per operator: 0.97^2 = 0.94 >= 0.93 allows two, 0.97^3 = 0.91 does not.
    selection = select_models(chain(), estimator(), MinCost(quality=0.93))
    assert sorted(selection.tiers.values()) == ["large", "small", "small"]
    assert selection.estimate.quality >= 0.93
    assert len(selection.steps) == 2 and all(step.quality_lost > 0 for step in selection.steps)


def test_best_saving_per_quality_lost_goes_first() -> None:
    # The filter runs on every row (most dollars); the classify loses less quality on small.
    quality = {("topic of {text}", "small"): 0.99, "small": 0.96, "large": 1.0}
    selection = select_models(chain(), estimator(quality=quality), MinCost(quality=0.95))
    # Ratios: classify saves $45 for 0.01 lost (4,500/unit), the filter $90 for 0.04 (2,250), the
    # map $45 for 0.04 (1,125). After the classify and the filter, the map would break the bound.
    assert [step.path for step in selection.steps] == ["", "input.input"]
    assert selection.tiers == {"": "small", "input": "large", "input.input": "small"}


@pytest.mark.parametrize("bound", [0.8, 0.9, 0.93, 0.95, 0.99])
def test_greedy_cost_is_within_ten_percent_of_exhaustive(bound: float) -> None:
    plan = chain()
    estimate = estimator(ops_price={"summary of {text}": 3.0, "topic of {text}": 0.5})
    policy = MinCost(quality=bound)
    greedy = select_models(plan, estimate, policy)
    _, best = exhaustive(plan, estimate, policy, choosable_paths(plan))
    assert greedy.estimate.dollars.value <= best.dollars.value * 1.10 + 1e-12


def test_max_quality_downgrades_only_to_meet_the_budget() -> None:
    estimate = estimator()
    all_large = estimate(chain(), None).dollars.value
    assert select_models(chain(), estimate, MaxQuality(budget_dollars=all_large)).steps == ()
    tight = select_models(chain(), estimate, MaxQuality(budget_dollars=all_large * 0.7))
    assert tight.estimate.dollars.value <= all_large * 0.7 and tight.steps


def test_nothing_feasible_keeps_the_top_tier() -> None:
    selection = select_models(chain(), estimator(quality={"large": 0.5, "small": 0.4}), MinCost(quality=0.9))
    assert set(selection.tiers.values()) == {"large"}


def test_apply_tiers_pins_each_operator() -> None:
    plan = apply_tiers(chain(), {"": "small", "input.input": "large"})
    assert plan.tier == "small" and plan.input.input.tier == "large" and plan.input.tier == "auto"  # type: ignore[attr-defined]


def test_optimize_plan_uses_the_estimator_and_policy() -> None:
    result = optimize_plan(chain(), estimator=estimator(), policy=MinCost(quality=0.9))
    assert result.selection is not None
    tiers = [getattr(node, "tier", None) for node in (result.plan, result.plan.children[0])]
    assert "small" in tiers and "auto" not in tiers


def test_cascades_are_left_to_the_router() -> None:
    from semray.operators.semantic import QualityTarget

    scan = memory_scan("t", TABLE)
    plan = SemFilter(input=scan, instruction="{text} is cheap to get wrong", quality=QualityTarget(level=0.9))
    plan = SemFilter(input=plan, instruction="{text} is odd", tier="cascade")
    assert choosable_paths(plan) == []
    assert select_models(plan, estimator(), MinCost(quality=0.9)).tiers == {}
