"""Competitive sub-agents: several candidate drafts from isolated contexts; validators and the cost model pick.

With ``LoopConfig.candidates`` above 1 each attempt of the plan unit asks the manipulation agent
for that many drafts at once (``compete``: one branch of the attempt per candidate, run in threads
by ``subagents.run_at_once``), each from the same context (none sees another's draft). Every
candidate is validated on its own, in its branch (grammar, span divergence, judges), and journaled
as its own sub-attempt: its steps and its verdict carry its branch name, its draft sits in its own
staging folder. Among the valid ones the cheapest by the cost model wins (``PlanCost``: estimated
dollars, then latency, then plan size; the first of equals in candidate order, not in finishing
order). Losers leave no trace in later prompts, the workspace or memory: only the winner (or, when
none is valid, the first candidate's verdict) reaches the loop.

>>> pick([Candidate("a", ok=True, cost=(2.0, 0.0, 9)), Candidate("b", ok=True, cost=(0.5, 0.0, 12))]).text
'b'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol, TypeVar

from semray.cost_model.plan_cost import TOP_TIER, estimate_plan
from semray.cost_model.prices import TierProfile
from semray.cost_model.statistics import PlanStatistics
from semray.errors import SemrayError
from semray.log import get_logger
from semray.operators import Node, plan_to_json
from semray.planner.agents.step import StepRunner
from semray.planner.agents.subagents import run_at_once
from semray.planner.agents.units import Branch, UnitAttempt, Verdict

log = get_logger(__name__)

Cost = tuple[float, float, int]
"""A plan's rank key: estimated dollars, latency in seconds, size of its JSON (smaller is cheaper)."""
PlanCost = Callable[[Node], Cost]
UNPRICED = (float("inf"), float("inf"), 0)


class Validated(Protocol):
    """A candidate's validation as the pick reads it: the verdict and the plan it built (None: none)."""

    @property
    def verdict(self) -> Verdict: ...

    @property
    def plan(self) -> Node | None: ...


V = TypeVar("V", bound=Validated)


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


def compete(
    attempt: UnitAttempt,
    count: int,
    draft: Callable[[StepRunner], str],
    check: Callable[[str, StepRunner], V],
    cost: PlanCost,
    parallelism: int,
) -> tuple[str, V]:
    """Draft and validate ``count`` candidates at once, each on its own branch; the winner's text and validation.

    ``draft(runner)`` and ``check(text, runner)`` run in the candidate's branch (its forked runner); the
    pick is journaled with the attempt (``branches_merged``).
    """
    branches = tuple(attempt.branch(f"candidate-{number}") for number in range(count))

    def candidate(branch: Branch) -> tuple[str, V]:
        text = draft(branch.runner)
        branch.write_file("draft.json", text.encode())  # the candidate's own workspace: never published
        found = check(text, branch.runner)
        attempt.branch_verdict(branch, found.verdict)
        return text, found

    results = run_at_once([partial(candidate, branch) for branch in branches], parallelism)
    candidates = [
        Candidate(text, found.verdict.ok, cost(found.plan) if found.verdict.ok and found.plan else UNPRICED)
        for text, found in results
    ]
    winner = pick(candidates)
    chosen = candidates.index(winner) if winner is not None else 0
    attempt.merged("picked", branches, (branches[chosen].name,) if winner is not None else ())
    log.info(
        "candidate_chosen",
        candidates=count,
        valid=sum(candidate.ok for candidate in candidates),
        chosen=chosen,
        cost=None if winner is None else winner.cost[0],
    )
    return results[chosen]
