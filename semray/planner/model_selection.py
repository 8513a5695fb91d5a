"""Model selection: which tier each semantic operator runs on, under the policy's quality bound.

Start with every undecided semantic operator (``tier="auto"``) on the top tier of the ladder
(``large``). Then, repeatedly, try moving each operator one rung down, estimate the plan, and
take the move with the most cost saved per unit of quality lost among the moves after which
the plan is still feasible for the policy (for ``MinCost``: the plan's quality bound still
holds). Stop when no move is feasible and saves anything. The greedy pass ends with
exchanges (one operator a rung up and another down, or one more down) while they give a
cheaper feasible plan that the policy prefers: they recover the cases where the best ratio
spent the quality budget on a small saving. Every assignment visited is kept; the policy
ranks them and its first choice wins, so a policy that wants quality (``MaxQuality``) keeps
the top tier where its budget allows, and ``MinCost`` gets the cheapest feasible one.

When even the all-``large`` plan is infeasible for a policy with a budget, downgrades are
taken (best ratio first) until it becomes feasible; if nothing is feasible, every operator
stays on the top tier and a warning is logged.

Operators with a pinned tier keep it, and so do cascades (``tier="cascade"``, or ``auto``
with a quality target): the router calibrates their thresholds at run time. Choosing a
cascade here waits for the cost model to price one (it has no ``cascade`` profile yet).

The cost of a plan is `costing.operator_cost` (dollars,
GPU-seconds as tie-breaker); quality is the cost model's plan quality bound.

>>> select_models(plan, estimator, MinCost(quality=0.9)).tiers  # doctest: +SKIP
{'input': 'small', 'input.input': 'large'}
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import structlog

from semray.operators.base import Node
from semray.planner.capabilities import rebuild
from semray.planner.costing import Estimator, PlanEstimateLike, PolicyLike, operator_cost
from semray.planner.paths import operator_paths, rewrite_at_paths

LADDER: tuple[str, ...] = ("large", "small")
"""Tiers from best (and dearest) to cheapest."""

QUALITY_EPSILON = 1e-9

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class TierMove:
    """One accepted move: the operator at ``path`` went from ``source`` to ``target`` (a rung
    down; a rung up only as half of an exchange), saving ``cost_saved`` for ``quality_lost``."""

    path: str
    source: str
    target: str
    cost_saved: float
    quality_lost: float


@dataclass(frozen=True, slots=True)
class Selection:
    """The chosen tier per operator path, its estimate, the moves taken, and how many
    assignments were estimated."""

    tiers: Mapping[str, str]
    estimate: PlanEstimateLike
    steps: tuple[TierMove, ...]
    estimated: int


def choosable_paths(plan: Node) -> list[str]:
    """Paths of the semantic operators whose tier the optimizer decides: ``tier="auto"`` without
    a quality target (one with a target asked for a cascade, which the router calibrates)."""
    nodes = operator_paths(plan).items()
    return [
        path
        for path, node in nodes
        if node.calls_llm and getattr(node, "tier", None) == "auto" and getattr(node, "quality", None) is None
    ]


Visit = tuple[dict[str, str], PlanEstimateLike, tuple[TierMove, ...]]


def select_models(plan: Node, estimate: Estimator, policy: PolicyLike, ladder: tuple[str, ...] = LADDER) -> Selection:
    """Greedy downgrades by cost saved per quality lost; the policy picks among the visited plans."""
    paths = choosable_paths(plan)
    tiers = {path: ladder[0] for path in paths}
    visited: list[Visit] = [(tiers, estimate(plan, tiers), ())]
    estimated = 1
    while True:
        tiers, current, steps = visited[-1]
        moves = [_try(plan, estimate, tiers, current, path, ladder) for path in paths if tiers[path] != ladder[-1]]
        estimated += len(moves)
        allowed = [move for move in moves if move[1].cost_saved > 0]
        if policy.feasible(current):  # a feasible plan moves only to feasible plans
            allowed = [move for move in allowed if policy.feasible(move[2])]
        if not allowed:
            break
        _, move, trial_estimate, trial = max(allowed, key=lambda candidate: candidate[0])
        visited.append((trial, trial_estimate, (*steps, move)))
        log.debug(
            "planner.downgrade", path=move.path, target=move.target, saved=move.cost_saved, lost=move.quality_lost
        )
    feasible = [entry for entry in visited if policy.feasible(entry[1])]
    if feasible:
        improved, count = _exchange(plan, estimate, policy, feasible[policy.rank([e[1] for e in feasible])[0]], ladder)
        feasible.append(improved)
        estimated += count
    if not feasible:
        log.warning("planner.no_feasible_tiers", operators=len(paths), hint="every operator stays on the top tier")
        return Selection(tiers=visited[0][0], estimate=visited[0][1], steps=(), estimated=estimated)
    tiers, chosen, steps = feasible[policy.rank([entry[1] for entry in feasible])[0]]
    return Selection(tiers=tiers, estimate=chosen, steps=steps, estimated=estimated)


def _exchange(
    plan: Node, estimate: Estimator, policy: PolicyLike, start: Visit, ladder: tuple[str, ...]
) -> tuple[Visit, int]:
    """Improve the greedy choice by exchanges: one operator a rung up and another a rung down
    (or just one more down), while that gives a feasible plan the policy ranks higher and that
    costs less. Returns the improved visit and how many plans were estimated.

    Greedy by ratio can spend the quality budget on an operator whose downgrade saves little;
    an exchange frees that budget for a bigger saving. Each round costs ``O(n^2)`` estimates.
    """
    tiers, current, steps = start
    count = 0
    while True:
        candidates: list[tuple[dict[str, str], PlanEstimateLike, tuple[TierMove, ...]]] = []
        for up, down in itertools.product([None, *tiers], tiers):
            moves = _exchange_moves(tiers, up, down, ladder)
            if moves is None:
                continue
            trial = {**tiers, **{move.path: move.target for move in moves}}
            trial_estimate = estimate(plan, trial)
            count += 1
            if policy.feasible(trial_estimate) and operator_cost(trial_estimate) < operator_cost(current):
                saved = operator_cost(current) - operator_cost(trial_estimate)
                lost = current.quality - trial_estimate.quality
                moves = tuple(replace(move, cost_saved=saved, quality_lost=lost) for move in moves)
                candidates.append((trial, trial_estimate, moves))
        if not candidates:
            return (tiers, current, steps), count
        best = candidates[policy.rank([candidate[1] for candidate in candidates])[0]]
        if policy.rank([current, best[1]])[0] != 1:
            return (tiers, current, steps), count
        tiers, current, steps = best[0], best[1], (*steps, *best[2])


def _exchange_moves(
    tiers: dict[str, str], up: str | None, down: str, ladder: tuple[str, ...]
) -> tuple[TierMove, ...] | None:
    if up == down or ladder.index(tiers[down]) + 1 >= len(ladder):
        return None
    moves = [
        TierMove(
            path=down, source=tiers[down], target=ladder[ladder.index(tiers[down]) + 1], cost_saved=0, quality_lost=0
        )
    ]
    if up is not None:
        if ladder.index(tiers[up]) == 0:
            return None
        moves.append(
            TierMove(
                path=up, source=tiers[up], target=ladder[ladder.index(tiers[up]) - 1], cost_saved=0, quality_lost=0
            )
        )
    return tuple(moves)


def _try(
    plan: Node,
    estimate: Estimator,
    tiers: dict[str, str],
    current: PlanEstimateLike,
    path: str,
    ladder: tuple[str, ...],
) -> tuple[float, TierMove, PlanEstimateLike, dict[str, str]]:
    """Estimate moving the operator at ``path`` one rung down: (ratio, move, estimate, tiers)."""
    target = ladder[ladder.index(tiers[path]) + 1]
    trial = {**tiers, path: target}
    trial_estimate = estimate(plan, trial)
    saved = operator_cost(current) - operator_cost(trial_estimate)
    lost = max(current.quality - trial_estimate.quality, 0.0)
    move = TierMove(path=path, source=tiers[path], target=target, cost_saved=saved, quality_lost=lost)
    return saved / max(lost, QUALITY_EPSILON), move, trial_estimate, trial


def apply_tiers(plan: Node, tiers: Mapping[str, str]) -> Node:
    """``plan`` with the operator at each path pinned to its tier."""
    return rewrite_at_paths(plan, {path: _pin(tier) for path, tier in tiers.items()})


def _pin(tier: str) -> Callable[[Node], Node]:
    def pin(node: Node) -> Node:
        return rebuild(node, tier=tier) if getattr(node, "tier", tier) != tier else node

    return pin
