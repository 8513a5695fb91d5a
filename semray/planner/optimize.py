"""The optimizer's entry point: rules to a fixpoint, join ordering, model selection.

>>> optimized = optimize(query.plan, statistics, profiles_from_serving(config), MinCost(quality=0.9))  # doctest: +SKIP

Without profiles (no serving configuration to price), the plan is rewritten and its joins
ordered by the default row counts (`semray.cost_model.cardinality.default_rows`), and semantic
operators keep ``tier="auto"``. With profiles, every estimate comes from the cost model's
``estimate_plan`` (joins are ordered by its rows, `semray.cost_model.cardinality.plan_rows`)
and the policy (default ``MinCost()``: the cheapest plan whose quality bound is at least 0.9)
picks the tiers, a cascade and its quality target among them. Profiles without an ``embedding`` tier cannot price
a cascade, so its rung is left off the ladder. Given ``topic_labels`` (``Settings.topic_pruning``: the Query
passes the catalog's ``TopicLabels``), semantic filters on a topic of an organised catalogued collection are
pruned to its labelled documents first (``rules.prune_by_topic``), so the rules and the cost model see the pruned plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from semray.cost_model.cardinality import default_rows, plan_rows
from semray.cost_model.estimates import PlanEstimate
from semray.cost_model.policies import MinCost, Policy
from semray.operators.base import Node
from semray.operators.keys import statistics_key
from semray.planner.cost_estimator import Estimator, cost_model_estimator
from semray.planner.join_order import order_joins
from semray.planner.model_selection import CASCADE, LADDER, Selection, apply_tiers, select_models
from semray.planner.rules import RULES, Rule, RuleContext, apply_rules
from semray.planner.rules.prune_by_topic import TopicDocuments, prune_by_topic

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Optimization:
    """The optimized plan and how it was reached: the plan after the rules, after join
    ordering, the tier selection (None without profiles) and the chosen plan's estimate."""

    plan: Node
    written: Node
    rewritten: Node
    reordered: Node
    selection: Selection | None

    @property
    def estimate(self) -> PlanEstimate | None:
        return self.selection.estimate if self.selection else None


def optimize(
    plan: Node,
    statistics: Any = None,
    profiles: Mapping[str, Any] | None = None,
    policy: Policy = MinCost(),  # noqa: B008 - frozen, so one shared default is safe
    *,
    estimator: Estimator | None = None,
    topic_labels: TopicDocuments | None = None,
) -> Node:
    """The optimized plan (see `optimize_plan`)."""
    return optimize_plan(plan, statistics, profiles, policy, estimator=estimator, topic_labels=topic_labels).plan


def optimize_plan(
    plan: Node,
    statistics: Any = None,
    profiles: Mapping[str, Any] | None = None,
    policy: Policy = MinCost(),  # noqa: B008 - frozen, so one shared default is safe
    *,
    estimator: Estimator | None = None,
    rules: tuple[Rule, ...] = RULES,
    ladder: tuple[str, ...] = LADDER,
    topic_labels: TopicDocuments | None = None,
) -> Optimization:
    """Rewrite ``plan`` with ``rules``, order its joins, and choose tiers under ``policy``.

    ``statistics`` is a ``semray.cost_model.statistics.PlanStatistics`` and ``profiles`` the
    tiers' ``TierProfile`` by name; ``estimator`` replaces the cost model (tests). ``topic_labels``
    prunes semantic filters on a catalogued topic by its stored labels before the rules (an opt-in
    trade of recall for calls, ``Settings.topic_pruning``); None: no pruning.
    """
    pruned = plan if topic_labels is None else prune_by_topic(plan, topic_labels)
    rewritten = apply_rules(pruned, rule_context(statistics, profiles))
    if estimator is None and profiles is not None:
        estimator = cost_model_estimator(statistics, profiles)
    if estimator is None:
        reordered = order_joins(rewritten, default_rows)
        log.info("planner.optimized", tiers="auto", changed=reordered != plan)
        return Optimization(plan=reordered, written=plan, rewritten=rewritten, reordered=reordered, selection=None)
    if profiles is not None and "embedding" not in profiles:
        ladder = tuple(rung for rung in ladder if rung != CASCADE)
    reordered = order_joins(rewritten, plan_rows(rewritten, estimator(rewritten, None)))
    selection = select_models(reordered, estimator, policy, ladder)
    chosen = apply_tiers(reordered, selection.tiers, selection.targets)
    log.info(
        "planner.optimized",
        tiers=dict(selection.tiers),
        cascade_levels={path: target.level for path, target in selection.targets.items()},
        dollars=selection.estimate.dollars.value,
        quality=selection.estimate.quality,
        estimated_plans=selection.estimated,
    )
    return Optimization(plan=chosen, written=plan, rewritten=rewritten, reordered=reordered, selection=selection)


def rule_context(statistics: Any, profiles: Mapping[str, Any] | None) -> RuleContext:
    """What the rules may know: selectivities from ``statistics``, per-row cost from its token
    counts priced at the top tier's input fee (without profiles, tokens alone)."""
    if statistics is None:
        return RuleContext()
    fee = 1.0
    if profiles and LADDER[0] in profiles:
        fee = float(profiles[LADDER[0]].fee_in_per_m) / 1e6 or 1.0

    def selectivity(node: Node) -> float | None:
        interval = statistics.selectivity.get(statistics_key(node))
        return None if interval is None else float(interval.value)

    def row_cost(node: Node) -> float | None:
        tokens = statistics.tokens_per_row.get(statistics_key(node))
        return None if tokens is None else float(tokens.value) * fee

    return RuleContext(selectivity=selectivity, row_cost=row_cost)
