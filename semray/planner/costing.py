"""The optimizer's view of the cost model: the estimates it reads and the one place it calls
``estimate_plan``.

The optimizer reads estimates through the small protocols below (what
``semray.cost_model.estimates`` provides), so model selection and join ordering can be tested
with a hand-written estimator, while production always goes through `cost_model_estimator`,
which calls ``semray.cost_model.plan_cost.estimate_plan``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.statistics import PlanStatistics
from semray.operators.base import Node


class IntervalLike(Protocol):
    @property
    def value(self) -> float: ...
    @property
    def low(self) -> float: ...
    @property
    def high(self) -> float: ...


class OperatorEstimateLike(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def tier(self) -> str: ...
    @property
    def rows_in(self) -> IntervalLike: ...
    @property
    def rows_out(self) -> IntervalLike: ...
    @property
    def input_tokens(self) -> IntervalLike: ...
    @property
    def output_tokens(self) -> IntervalLike: ...
    @property
    def dollars(self) -> IntervalLike: ...
    @property
    def gpu_seconds(self) -> IntervalLike: ...
    @property
    def latency_s(self) -> IntervalLike: ...
    @property
    def quality(self) -> float: ...


class PlanEstimateLike(Protocol):
    @property
    def operators(self) -> Sequence[OperatorEstimateLike]: ...
    @property
    def rows(self) -> IntervalLike: ...
    @property
    def dollars(self) -> IntervalLike: ...
    @property
    def gpu_seconds(self) -> IntervalLike: ...
    @property
    def latency_s(self) -> IntervalLike: ...
    @property
    def quality(self) -> float: ...


class PolicyLike(Protocol):
    def rank(self, estimates: Sequence[Any]) -> list[int]: ...
    def feasible(self, estimate: Any) -> bool: ...


Estimator = Callable[[Node, Mapping[str, str] | None], PlanEstimateLike]
"""``estimator(plan, tiers)``: the estimate of ``plan`` with each operator path in ``tiers`` on that tier."""


def cost_model_estimator(statistics: Any, profiles: Mapping[str, Any]) -> Estimator:
    """An estimator that calls the cost model's ``estimate_plan`` (``statistics`` may be None:
    the cost model then estimates without measurements)."""
    measured = statistics if statistics is not None else PlanStatistics()

    def estimate(plan: Node, tiers: Mapping[str, str] | None) -> PlanEstimateLike:
        result: PlanEstimateLike = estimate_plan(plan, measured, profiles, tiers)
        return result

    return estimate


def operator_cost(estimate: PlanEstimateLike | OperatorEstimateLike) -> float:
    """One number to trade against quality: dollars, with GPU-seconds as the tie-breaker for
    self-hosted tiers whose dollars are zero (one GPU-second counts as a thousandth of a cent)."""
    return estimate.dollars.value + 1e-5 * estimate.gpu_seconds.value
