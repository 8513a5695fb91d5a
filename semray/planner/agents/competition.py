"""Competitive sub-agents: several candidate drafts from isolated contexts; validators and the cost model pick.

With ``LoopConfig.candidates`` above 1 each attempt of the plan unit asks the manipulation agent
for that many drafts, each from the same context (none sees another's draft). Every candidate is
validated on its own (grammar, span divergence, judges); among the valid ones the cheapest by
the cost model wins (``PlanCost``: estimated dollars, then latency, then plan size). Losers leave
no trace in later prompts or memory: only the winner (or, when none is valid, the first
candidate's verdict) reaches the loop.

>>> pick([Candidate("a", ok=True, cost=(2.0, 0.0, 9)), Candidate("b", ok=True, cost=(0.5, 0.0, 12))]).text
'b'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from semray.cost_model.plan_cost import TOP_TIER, estimate_plan
from semray.cost_model.prices import TierProfile
from semray.cost_model.statistics import PlanStatistics
from semray.errors import SemrayError
from semray.log import get_logger
from semray.operators import Node, plan_to_json

log = get_logger(__name__)

Cost = tuple[float, float, int]
"""A plan's rank key: estimated dollars, latency in seconds, size of its JSON (smaller is cheaper)."""
PlanCost = Callable[[Node], Cost]
UNPRICED = (float("inf"), float("inf"), 0)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One candidate draft: its text, whether it passed validation, and its cost (valid ones only)."""

    text: str
    ok: bool
    cost: Cost = UNPRICED


def plan_cost(profiles: Mapping[str, TierProfile]) -> PlanCost:
    """The cost model's estimate of a plan on no measured statistics (its documented defaults)."""

    def cost(plan: Node) -> Cost:
        size = len(plan_to_json(plan, indent=None))
        try:
            estimate = estimate_plan(plan, PlanStatistics(), profiles)
        except SemrayError as error:  # a tier the profiles do not price
            log.info("candidate_unpriced", error=f"{type(error).__name__}: {error}"[:200])
            return (float("inf"), float("inf"), size)
        return (estimate.dollars.value, estimate.latency_s.value, size)

    return cost


def default_cost(profile: TierProfile) -> PlanCost:
    """Prices a plan's semantic operators at the planner's own tier (when no serving profiles are given)."""
    return plan_cost({TOP_TIER: profile, "small": profile, "medium": profile})


def pick(candidates: Sequence[Candidate]) -> Candidate | None:
    """The cheapest valid candidate (the first of equals), or None when none is valid."""
    valid = [candidate for candidate in candidates if candidate.ok]
    return min(valid, key=lambda candidate: candidate.cost) if valid else None
