"""Model selection: which tier each semantic operator runs on, under the policy's quality bound.

Start with every undecided semantic operator (``tier="auto"``) on the top rung of the ladder
(``large``). Then, repeatedly, try moving each operator to each cheaper rung of its ladder,
estimate the plan, and take the move with the most cost saved per unit of quality lost among
the moves after which the plan is still feasible for the policy (for ``MinCost``: the plan's
quality bound still holds). Stop when no move is feasible and saves anything. The greedy pass
ends with exchanges (one operator up and another down, or one more down) while they give a
cheaper feasible plan that the policy prefers: they recover the cases where the best ratio
spent the quality budget on a small saving. For a policy with a quality bound, a knapsack pass
follows (`_knapsack`): the union bound makes per-operator losses add up and an operator's tier
changes only its own cost, so choosing tiers is a multiple-choice knapsack, solved exactly for
that separable model by a Pareto-frontier dynamic programme over the single-operator moves the
greedy already estimated (``search="greedy"`` leaves it out: the fallback, kept for comparison).
It finds the exchanges of three or more operators that greedy misses. Every assignment visited is kept; the policy ranks
them and its first choice wins, so a policy that wants quality (``MaxQuality``) keeps the top
tier where its budget allows, and ``MinCost`` gets the cheapest feasible one.

**The ladder** is ``large -> cascade -> small``. The ``cascade`` rung is only on the ladders of
operators that can cascade (filters, classifications, scores: `cascade_kind`); moving an
operator onto it sets ``tier="cascade"`` and a ``QualityTarget`` on the node, and the router
turns that target into thresholds at run time from its calibration labels (docs/cascade.md).
So model selection "sets the cascade thresholds" by setting each cascade's target:

* **Allocation.** A policy with a quality bound ``q`` (``MinCost``, ``MinLatency``) leaves a
  budget ``B = quality(all-large plan) - q`` (the all-large plan's quality counts the
  operators the user pinned). Each of the ``k`` choosable operators that can cascade gets an
  equal share ``b = B / k`` of it, as the target whose cascade quality
  ``(1 - delta) level`` is at least ``1 - b`` (`cascade_target`: ``delta = b / 5``,
  ``level = (1 - b) / (1 - delta)``), so every set of cascades keeps the union bound >= ``q``.
  A policy without a quality bound (``MaxQuality``) gives cascades the default target
  (accuracy 0.9, delta 0.05).
* **Re-levelling.** Once the tiers are chosen, the quality the chosen plan has to spare above
  ``q`` is shared equally among its cascades (each one's budget grows by ``slack / m``), so a
  lone cascade gets the whole budget: its target is the lowest the policy allows.

With cascade targets, the greedy pass (and its exchanges) runs twice, with and without the
cascade rung, and the policy ranks every plan either visited: the cascades' small quality
losses can otherwise crowd out one larger saving on the small tier, so adding the rung never
makes the estimated choice worse than choosing between large and small alone.

When even the all-``large`` plan is infeasible for a policy with a budget, downgrades are
taken (best ratio first) until it becomes feasible; if nothing is feasible, every operator
stays on the top tier and a warning is logged.

Operators with a pinned tier keep it, and so do cascades the user asked for (``tier="cascade"``,
or ``auto`` with a quality target): they are priced as cascades at their own target.

The cost of a plan is `cost_estimator.operator_cost` (dollars, GPU-seconds as tie-breaker); quality is
the cost model's plan quality bound.

>>> select_models(plan, estimator, MinCost(quality=0.9)).tiers  # doctest: +SKIP
{'input': 'small', 'input.input': 'cascade'}
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import structlog

from semray.cost_model.cascade_cost import cascade_kind
from semray.cost_model.estimates import PlanEstimate
from semray.cost_model.policies import Policy
from semray.cost_model.quality import cascade_quality
from semray.operators.base import Node
from semray.operators.plan_paths import operator_paths, rewrite_at_paths
from semray.operators.semantic import QualityTarget, SemanticNode
from semray.planner.capabilities import rebuild
from semray.planner.cost_estimator import Estimator, operator_cost

CASCADE = "cascade"
LADDER: tuple[str, ...] = ("large", CASCADE, "small")
"""Rungs from best (and dearest) to cheapest; ``cascade`` only for operators that can cascade."""
DELTA_SHARE = 0.2
"""Share of a cascade's error budget spent on its failure probability ``delta``."""

QUALITY_EPSILON = 1e-9

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class TierMove:
    """One accepted move: the operator at ``path`` went from ``source`` to ``target`` (down the
    ladder; up only as half of an exchange), saving ``cost_saved`` for ``quality_lost``."""

    path: str
    source: str
    target: str
    cost_saved: float
    quality_lost: float


@dataclass(frozen=True, slots=True)
class Selection:
    """The chosen tier per operator path, its estimate, the moves taken, how many assignments
    were estimated, and the quality target of each operator chosen to cascade."""

    tiers: Mapping[str, str]
    estimate: PlanEstimate
    steps: tuple[TierMove, ...]
    estimated: int
    targets: Mapping[str, QualityTarget] = field(default_factory=dict)


def choosable_paths(plan: Node) -> list[str]:
    """Paths of the semantic operators whose tier the optimizer decides: ``tier="auto"`` without
    a quality target (one with a target asked for a cascade at that target)."""
    nodes = operator_paths(plan).items()
    return [path for path, node in nodes if isinstance(node, SemanticNode) and node.tier_is_open()]


def rungs_of(node: Node, ladder: tuple[str, ...] = LADDER) -> tuple[str, ...]:
    """The ladder of one operator: without the cascade rung when it cannot cascade."""
    return ladder if cascade_kind(node) is not None else tuple(rung for rung in ladder if rung != CASCADE)


def cascade_target(budget: float) -> QualityTarget | None:
    """The accuracy target whose cascade quality ``(1 - delta) level`` is at least ``1 - budget``,
    with ``delta = DELTA_SHARE * budget`` (rounded down to 4 decimals) and the level rounded up;
    None when the budget is too small for a target below 1. A tight target gets the calibration
    labels it needs to be certified at all (``QualityTarget.labels_to_certify``; with fewer the
    cascade would decide no row), which the cost model then prices.

    >>> cascade_target(0.1)
    QualityTarget(metric='accuracy', level=0.9184, delta=0.02, labels=200, strict=False)
    >>> cascade_target(0.01).labels
    1028
    """
    # The tolerance keeps 0.2 * 0.05 at 0.01 (float error would floor it to 0.0099); the level is
    # computed from the rounded delta, so the target's quality bound holds either way.
    delta = math.floor(DELTA_SHARE * budget * 1e4 + 1e-6) / 1e4
    if delta <= 0.0 or budget >= 1.0:
        return None
    level = math.ceil((1.0 - budget) / (1.0 - delta) * 1e4) / 1e4
    if not 0.0 < level < 1.0:
        return None
    target = QualityTarget(level=level, delta=delta)
    return target if target.certifiable else target.model_copy(update={"labels": target.labels_to_certify()})


def policy_quality(policy: Policy) -> float | None:
    """The quality bound a policy requires (``MinCost``, ``MinLatency``), or None (``MaxQuality``)."""
    quality = getattr(policy, "quality", None)
    return float(quality) if isinstance(quality, int | float) else None


Visit = tuple[dict[str, str], PlanEstimate, tuple[TierMove, ...]]
Search = Literal["knapsack", "greedy"]
FRONTIER_LIMIT = 256
"""Most (loss, cost) points the knapsack pass keeps per operator added; beyond it the frontier is
thinned (evenly in loss), so the pass stays bounded on big plans and is a heuristic there."""
KNAPSACK_ROUNDS = 4
"""Most knapsack solutions estimated as whole plans (each round corrects the quality budget by
how far the last estimate's quality was from the predicted one)."""


@dataclass(frozen=True, slots=True)
class _Trials:
    """Estimates of tier assignments, each computed once, with each cascade at its target."""

    plan: Node
    estimate: Estimator
    targets: dict[str, QualityTarget]
    cache: dict[tuple[tuple[str, str], ...], PlanEstimate] = field(default_factory=dict)

    def __call__(self, tiers: Mapping[str, str]) -> PlanEstimate:
        key = tuple(sorted(tiers.items()))
        if key not in self.cache:
            self.cache[key] = self.estimate(with_targets(self.plan, tiers, self.targets), tiers)
        return self.cache[key]


def select_models(
    plan: Node,
    estimate: Estimator,
    policy: Policy,
    ladder: tuple[str, ...] = LADDER,
    search: Search = "knapsack",
) -> Selection:
    """Greedy downgrades by cost saved per quality lost, exchanges, and (``search="knapsack"``,
    for a policy with a quality bound) the knapsack pass; the policy picks among the visited plans.
    ``search="greedy"`` leaves the knapsack pass out (the documented fallback, for comparison)."""
    nodes = operator_paths(plan)
    paths = choosable_paths(plan)
    top = {path: ladder[0] for path in paths}
    top_estimate = estimate(plan, top)
    targets = _with_measured_shares(allocate_cascade_targets(plan, top_estimate, policy, ladder), top, estimate, plan)
    rungs = {path: tuple(r for r in rungs_of(nodes[path], ladder) if r != CASCADE or path in targets) for path in paths}
    trials = _Trials(plan, estimate, targets, {tuple(sorted(top.items())): top_estimate})
    # Greedy twice when cascades are possible: with them, and without (the cascade rung's small
    # losses can crowd out one larger saving on the small tier); the policy picks among both.
    ladders = [rungs]
    if targets:
        ladders.append({path: tuple(r for r in found if r != CASCADE) for path, found in rungs.items()})
    feasible: list[Visit] = []
    for allowed in ladders:
        visited = _greedy(trials, policy, paths, allowed, (top, top_estimate, ()))
        reached = [entry for entry in visited if policy.feasible(entry[1])]
        if reached:
            best = reached[policy.rank([entry[1] for entry in reached])[0]]
            feasible += [*reached, _exchange(trials, policy, best, allowed)]
    if search == "knapsack":
        feasible += _knapsack(trials, policy, (top, top_estimate, ()), rungs)
    if not feasible:
        log.warning("planner.no_feasible_tiers", operators=len(paths), hint="every operator stays on the top tier")
        return Selection(tiers=top, estimate=top_estimate, steps=(), estimated=len(trials.cache))
    tiers, chosen, steps = feasible[policy.rank([entry[1] for entry in feasible])[0]]
    chosen_targets = {path: targets[path] for path, tier in tiers.items() if tier == CASCADE}
    chosen, chosen_targets = _relevel(trials, policy, tiers, chosen, chosen_targets)
    return Selection(tiers=tiers, estimate=chosen, steps=steps, estimated=len(trials.cache), targets=chosen_targets)


def _with_measured_shares(
    targets: dict[str, QualityTarget], top: dict[str, str], estimate: Estimator, plan: Node
) -> dict[str, QualityTarget]:
    """The cascade targets of operators whose cascade shares were measured: a cascade pays only
    when its proxies and small tier decide enough rows, and assumed shares cannot tell (a cascade
    on a weak small tier pays the small and the large tier for most rows)."""
    if not targets:
        return targets
    tiers = {**top, **{path: CASCADE for path in targets}}
    probe = estimate(with_targets(plan, tiers, targets), tiers)
    by_path = {operator.path: operator for operator in getattr(probe, "operators", ())}
    unmeasured = [path for path in targets if "cascade_shares" in getattr(by_path.get(path), "assumed", ())]
    if unmeasured:
        log.info(
            "planner.cascade_not_considered",
            operators=unmeasured,
            reason="cascade shares not measured",
            hint="measure them: execute(policy=..., measure=True)",
        )
    return {path: target for path, target in targets.items() if path not in unmeasured}


def _greedy(
    trials: _Trials, policy: Policy, paths: list[str], rungs: Mapping[str, tuple[str, ...]], start: Visit
) -> list[Visit]:
    """Every assignment the greedy pass visits from ``start``: the best feasible ratio move each
    time (any move by ratio while the plan is infeasible)."""
    visited = [start]
    while True:
        tiers, current, steps = visited[-1]
        moves = [
            _try(trials, tiers, current, path, lower) for path in paths for lower in _below(rungs[path], tiers[path])
        ]
        allowed = [move for move in moves if move[1].cost_saved > 0]
        if policy.feasible(current):  # a feasible plan moves only to feasible plans
            allowed = [move for move in allowed if policy.feasible(move[2])]
        if not allowed:
            return visited
        _, move, trial_estimate, trial = max(allowed, key=lambda candidate: candidate[0])
        visited.append((trial, trial_estimate, (*steps, move)))
        log.debug(
            "planner.downgrade", path=move.path, target=move.target, saved=move.cost_saved, lost=move.quality_lost
        )


def allocate_cascade_targets(
    plan: Node, top: PlanEstimate, policy: Policy, ladder: tuple[str, ...] = LADDER
) -> dict[str, QualityTarget]:
    """The target of each choosable operator that can cascade (path -> target): an equal share of
    the quality the policy can spare over ``top``, the all-top-tier plan's estimate. Empty when
    the ladder has no cascade rung or the budget is too small for a target below 1.

    With ``MinCost(q)`` and ``k`` such operators, each gets `cascade_target` of
    ``(top.quality - q) / k``, so any set of them on cascades keeps the union bound >= ``q``.
    """
    if CASCADE not in ladder:
        return {}
    nodes = operator_paths(plan)
    cascading = [path for path in choosable_paths(plan) if cascade_kind(nodes[path]) is not None]
    if not cascading:
        return {}
    bound = policy_quality(policy)
    if bound is None:
        return dict.fromkeys(cascading, QualityTarget())
    target = cascade_target((top.quality - bound) / len(cascading))
    return {} if target is None else dict.fromkeys(cascading, target)


def _relevel(
    trials: _Trials,
    policy: Policy,
    tiers: dict[str, str],
    chosen: PlanEstimate,
    targets: dict[str, QualityTarget],
) -> tuple[PlanEstimate, dict[str, QualityTarget]]:
    """Share the quality the chosen plan has to spare among its cascades (lower targets decide
    more rows cheaply); kept when the plan stays feasible and costs no more."""
    bound = policy_quality(policy)
    if not targets or bound is None or chosen.quality <= bound:
        return chosen, targets
    slack = (chosen.quality - bound) / len(targets)
    relevelled: dict[str, QualityTarget] = {}
    for path, target in targets.items():
        wider = cascade_target(1.0 - cascade_quality(target.level, target.delta) + slack)
        relevelled[path] = wider if wider is not None and wider.level < target.level else target
    if relevelled == targets:
        return chosen, targets
    estimate = trials.estimate(with_targets(trials.plan, tiers, relevelled), tiers)
    if policy.feasible(estimate) and operator_cost(estimate) <= operator_cost(chosen) + QUALITY_EPSILON:
        log.debug("planner.relevel", levels={path: target.level for path, target in relevelled.items()})
        return estimate, relevelled
    return chosen, targets


def _knapsack(trials: _Trials, policy: Policy, start: Visit, rungs: Mapping[str, tuple[str, ...]]) -> list[Visit]:
    """Tier choice as the multiple-choice knapsack it is under a quality bound: the plan quality
    bound is a union bound (``1 - sum`` of per-operator losses), and an operator's tier changes
    its own cost, not how many rows reach the others, so each operator's rung is one item of
    (quality lost, cost change) measured by moving it alone from ``start`` (the greedy pass's
    first round: the same cached estimates). `_cheapest` solves it exactly for that separable
    model. The solution is then estimated as a whole plan, since the model is a prediction; where
    the estimate's quality differs from the predicted one (an estimator whose quality is not
    additive, such as a product of qualities), the budget is corrected by the difference and
    solved again, at most `KNAPSACK_ROUNDS` times. The feasible solutions join the visits.
    """
    tiers, current, _ = start
    bound = policy_quality(policy)
    if bound is None or not policy.feasible(current):
        return []
    base = operator_cost(current)
    items: list[tuple[str, list[tuple[float, float, str]]]] = []
    for path in tiers:
        options = [(0.0, 0.0, tiers[path])]
        for lower in _below(rungs[path], tiers[path]):
            moved = trials({**tiers, path: lower})
            options.append((current.quality - moved.quality, operator_cost(moved) - base, lower))
        items.append((path, options))
    visits: list[Visit] = []
    tried: set[tuple[tuple[str, str], ...]] = set()
    error = 0.0
    for _ in range(KNAPSACK_ROUNDS):
        solution = _cheapest(items, current.quality - bound + error + QUALITY_EPSILON)
        if solution is None or solution[1] in tried:
            break
        loss, choice = solution
        tried.add(choice)
        chosen = dict(choice)
        found = trials(chosen)
        if policy.feasible(found) and chosen != tiers:
            saved, lost = base - operator_cost(found), current.quality - found.quality
            moves = tuple(
                TierMove(path=path, source=tiers[path], target=rung, cost_saved=saved, quality_lost=lost)
                for path, rung in choice
                if rung != tiers[path]
            )
            visits.append((chosen, found, moves))
        error = found.quality - (current.quality - loss)
        if abs(error) <= QUALITY_EPSILON:
            break
    log.debug("planner.knapsack", rounds=len(tried), found=len(visits))
    return visits


Point = tuple[float, float, tuple[tuple[str, str], ...]]
"""(total quality lost, total cost change, the rung chosen per operator so far)."""


def _cheapest(
    items: list[tuple[str, list[tuple[float, float, str]]]], budget: float
) -> tuple[float, tuple[tuple[str, str], ...]] | None:
    """The cheapest choice of one option per operator whose losses sum to at most ``budget``:
    (its loss, its rungs). A dynamic programme over the operators keeps the Pareto frontier of
    (loss, cost) within the budget; exact while frontiers stay under `FRONTIER_LIMIT` points
    (always, for a handful of operators on three rungs), thinned beyond it."""
    frontier: list[Point] = [(0.0, 0.0, ())]
    for path, options in items:
        grown = [
            (loss + lost, cost + change, (*choice, (path, rung)))
            for loss, cost, choice in frontier
            for lost, change, rung in options
            if loss + lost <= budget
        ]
        frontier = _thinned(_pareto(grown))
    if not frontier:
        return None
    loss, _, choice = min(frontier, key=lambda point: point[1])
    return loss, choice


def _pareto(points: list[Point]) -> list[Point]:
    """The points no other point beats on both loss and cost, by increasing loss."""
    kept: list[Point] = []
    for point in sorted(points, key=lambda found: (found[0], found[1])):
        if not kept or point[1] < kept[-1][1] - QUALITY_EPSILON * 1e-3:
            kept.append(point)
    return kept


def _thinned(points: list[Point]) -> list[Point]:
    """At most `FRONTIER_LIMIT` points, evenly spread over the frontier; the cheapest always stays."""
    if len(points) <= FRONTIER_LIMIT:
        return points
    step = (len(points) - 1) / (FRONTIER_LIMIT - 1)
    return [points[round(index * step)] for index in range(FRONTIER_LIMIT)]


def _below(rungs: tuple[str, ...], tier: str) -> tuple[str, ...]:
    return rungs[rungs.index(tier) + 1 :]


def _above(rungs: tuple[str, ...], tier: str) -> tuple[str, ...]:
    return rungs[: rungs.index(tier)]


def _exchange(trials: _Trials, policy: Policy, start: Visit, rungs: Mapping[str, tuple[str, ...]]) -> Visit:
    """Improve the greedy choice by exchanges: one operator up the ladder and another down (or
    just one more down), while that gives a feasible plan the policy ranks higher and that
    costs less. Returns the improved visit.

    Greedy by ratio can spend the quality budget on an operator whose downgrade saves little;
    an exchange frees that budget for a bigger saving. Each round costs ``O((n r)^2)``
    estimates for ``n`` operators of ``r`` rungs.
    """
    tiers, current, steps = start
    while True:
        candidates: list[Visit] = []
        for moves in _exchange_moves(tiers, rungs):
            trial = {**tiers, **{move.path: move.target for move in moves}}
            trial_estimate = trials(trial)
            if policy.feasible(trial_estimate) and operator_cost(trial_estimate) < operator_cost(current):
                saved = operator_cost(current) - operator_cost(trial_estimate)
                lost = current.quality - trial_estimate.quality
                moves = tuple(replace(move, cost_saved=saved, quality_lost=lost) for move in moves)
                candidates.append((trial, trial_estimate, moves))
        if not candidates:
            return tiers, current, steps
        best = candidates[policy.rank([candidate[1] for candidate in candidates])[0]]
        if policy.rank([current, best[1]])[0] != 1:
            return tiers, current, steps
        tiers, current, steps = best[0], best[1], (*steps, *best[2])


def _exchange_moves(tiers: dict[str, str], rungs: Mapping[str, tuple[str, ...]]) -> Iterator[tuple[TierMove, ...]]:
    """One operator to a cheaper rung, alone or with another to a dearer rung."""
    for up, down in itertools.product([None, *tiers], tiers):
        if up == down:
            continue
        for lower in _below(rungs[down], tiers[down]):
            moved = TierMove(path=down, source=tiers[down], target=lower, cost_saved=0, quality_lost=0)
            if up is None:
                yield (moved,)
                continue
            for higher in _above(rungs[up], tiers[up]):
                yield moved, TierMove(path=up, source=tiers[up], target=higher, cost_saved=0, quality_lost=0)


def _try(
    trials: _Trials, tiers: dict[str, str], current: PlanEstimate, path: str, target: str
) -> tuple[float, TierMove, PlanEstimate, dict[str, str]]:
    """Estimate moving the operator at ``path`` to ``target``: (ratio, move, estimate, tiers)."""
    trial = {**tiers, path: target}
    trial_estimate = trials(trial)
    saved = operator_cost(current) - operator_cost(trial_estimate)
    lost = max(current.quality - trial_estimate.quality, 0.0)
    move = TierMove(path=path, source=tiers[path], target=target, cost_saved=saved, quality_lost=lost)
    return saved / max(lost, QUALITY_EPSILON), move, trial_estimate, trial


def with_targets(plan: Node, tiers: Mapping[str, str], targets: Mapping[str, QualityTarget]) -> Node:
    """``plan`` with each operator that ``tiers`` puts on the cascade rung set to cascade at its
    target (``tier="cascade"``, ``quality=target``); unchanged when none cascades."""
    cascades = {path: targets.get(path) for path, tier in tiers.items() if tier == CASCADE}
    if not cascades:
        return plan
    return rewrite_at_paths(plan, {path: _cascade(target) for path, target in cascades.items()})


def apply_tiers(plan: Node, tiers: Mapping[str, str], targets: Mapping[str, QualityTarget] | None = None) -> Node:
    """``plan`` with the operator at each path pinned to its tier; a ``cascade`` one also gets its
    quality target from ``targets`` (the default target when it has none there)."""
    cascading = with_targets(plan, tiers, targets or {})
    return rewrite_at_paths(cascading, {path: _pin(tier) for path, tier in tiers.items() if tier != CASCADE})


def _cascade(target: QualityTarget | None) -> Callable[[Node], Node]:
    def cascade(node: Node) -> Node:
        return rebuild(node, tier=CASCADE, quality=target)

    return cascade


def _pin(tier: str) -> Callable[[Node], Node]:
    def pin(node: Node) -> Node:
        given = node.given_tier() if isinstance(node, SemanticNode) else None
        return rebuild(node, tier=tier) if given is not None and given != tier else node

    return pin
