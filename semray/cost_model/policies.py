"""Policies rank plan estimates: which plan to run under a stated objective and constraint.

* `MinCost` (the default): the cheapest plan whose quality bound is at least ``quality``;
* `MaxQuality`: the best quality bound among plans whose expected dollars fit ``budget_dollars``;
* `MinLatency`: the fastest plan whose quality bound is at least ``quality``.

``rank`` returns the indices of ``estimates`` best first: feasible plans ordered by the
objective (ties broken by dollars, then latency, then the upper end of the dollar interval),
then infeasible ones ordered by how close they come (highest quality, or lowest dollars, first).
A policy compares point values (``.value``); a cautious caller can rank on the upper ends by
passing ``use_upper=True`` to MaxQuality (the budget must hold even for the interval's high end).

>>> from semray.cost_model.estimates import Interval, PlanEstimate
>>> def plan(dollars, quality):
...     money = Interval.exact(dollars)
...     return PlanEstimate((), Interval.exact(1), money, Interval.exact(0), Interval.exact(dollars), quality)
>>> plans = [plan(5.0, 0.99), plan(1.0, 0.80), plan(2.0, 0.95)]
>>> MinCost(quality=0.9).rank(plans)
[2, 0, 1]
>>> MaxQuality(budget_dollars=3.0).rank(plans)
[2, 1, 0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from semray.cost_model.estimates import EstimateError, PlanEstimate


class Policy(Protocol):
    def feasible(self, estimate: PlanEstimate) -> bool: ...

    def rank(self, estimates: Sequence[PlanEstimate]) -> list[int]: ...


def _tiebreak(estimate: PlanEstimate) -> tuple[float, float, float]:
    return (estimate.dollars.value, estimate.latency_s.value, estimate.dollars.high)


def _check_quality(quality: float) -> None:
    if not 0.0 <= quality <= 1.0:
        raise EstimateError(f"a quality target is a share in [0, 1], got {quality}")


@dataclass(frozen=True, slots=True)
class _QualityFloor:
    """A plan is feasible when its quality bound is at least ``quality``; feasible plans rank by
    the objective, the others by quality, then the objective's first two terms."""

    quality: float = 0.9

    def __post_init__(self) -> None:
        _check_quality(self.quality)

    def objective(self, estimate: PlanEstimate) -> tuple[float, float, float]:
        raise NotImplementedError

    def feasible(self, estimate: PlanEstimate) -> bool:
        return estimate.quality >= self.quality

    def rank(self, estimates: Sequence[PlanEstimate]) -> list[int]:
        def key(i: int) -> tuple[bool, float, float, float]:
            first, second, third = self.objective(estimates[i])
            if self.feasible(estimates[i]):
                return (False, first, second, third)
            return (True, -estimates[i].quality, first, second)

        return sorted(range(len(estimates)), key=key)


@dataclass(frozen=True, slots=True)
class MinCost(_QualityFloor):
    """Cheapest plan with ``quality`` bound >= the target (default 0.9)."""

    def objective(self, estimate: PlanEstimate) -> tuple[float, float, float]:
        return _tiebreak(estimate)


@dataclass(frozen=True, slots=True)
class MaxQuality:
    """Highest quality bound among plans whose dollars fit ``budget_dollars``."""

    budget_dollars: float
    use_upper: bool = False

    def __post_init__(self) -> None:
        if self.budget_dollars < 0:
            raise EstimateError(f"a budget is at least 0 dollars, got {self.budget_dollars}")

    def _dollars(self, estimate: PlanEstimate) -> float:
        return estimate.dollars.high if self.use_upper else estimate.dollars.value

    def feasible(self, estimate: PlanEstimate) -> bool:
        return self._dollars(estimate) <= self.budget_dollars

    def rank(self, estimates: Sequence[PlanEstimate]) -> list[int]:
        def key(i: int) -> tuple[bool, float, float, float, float]:
            e = estimates[i]
            if self.feasible(e):
                return (False, -e.quality, *_tiebreak(e))
            return (True, self._dollars(e), -e.quality, e.latency_s.value, e.dollars.high)

        return sorted(range(len(estimates)), key=key)


@dataclass(frozen=True, slots=True)
class MinLatency(_QualityFloor):
    """Fastest plan with ``quality`` bound >= the target (default 0.9)."""

    def objective(self, estimate: PlanEstimate) -> tuple[float, float, float]:
        return (estimate.latency_s.value, estimate.dollars.value, estimate.latency_s.high)


DEFAULT_POLICY = MinCost()
