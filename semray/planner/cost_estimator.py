"""The optimizer's view of the cost model: the one place it calls ``estimate_plan``.

The optimizer reads the cost model's own types (``semray.cost_model.estimates.PlanEstimate``,
``OperatorEstimate``, ``Interval``; ``semray.cost_model.policies.Policy``). An `Estimator` is a
function, so model selection and join ordering can be tested with a hand-written one (any
object with the same fields will do at run time), while production always goes through
`cost_model_estimator`, which calls ``semray.cost_model.plan_cost.estimate_plan``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from semray.cost_model.estimates import OperatorEstimate, PlanEstimate
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.prices import TierProfile
from semray.cost_model.statistics import PlanStatistics
from semray.operators.base import Node

Estimator = Callable[[Node, Mapping[str, str] | None], PlanEstimate]
"""``estimator(plan, tiers)``: the estimate of ``plan`` with each operator path in ``tiers`` on that tier."""


def cost_model_estimator(statistics: PlanStatistics | None, profiles: Mapping[str, TierProfile]) -> Estimator:
    """An estimator that calls the cost model's ``estimate_plan`` (``statistics`` may be None:
    the cost model then estimates without measurements)."""
    measured = statistics if statistics is not None else PlanStatistics()

    def estimate(plan: Node, tiers: Mapping[str, str] | None) -> PlanEstimate:
        return estimate_plan(plan, measured, profiles, tiers)

    return estimate


def operator_cost(estimate: PlanEstimate | OperatorEstimate) -> float:
    """One number to trade against quality: dollars, with GPU-seconds as the tie-breaker for
    self-hosted tiers whose dollars are zero (one GPU-second counts as a thousandth of a cent)."""
    return estimate.dollars.value + 1e-5 * estimate.gpu_seconds.value
