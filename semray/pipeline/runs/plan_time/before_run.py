"""The plan-time choices a query makes once, before its run: `prepare_run`.

``Query.execute``, ``iter_batches`` and ``publish_parquet`` call `prepare_run` once and run what it
returns; in order, each a journaled run of its own that a re-run finds and does not pay again:

1. **code**: every SemCode without a validated function gets one (``code_commit.commit_code``);
2. **code choice** (``Settings.code_choice``, with ``optimize``): the large tier writes code for the
   ``tier="auto"`` maps and extractions where that is cheaper (``code_choice.choose_code_for_run``);
   the settings the run gets no longer ask for it;
3. **join factorization check** (``Settings.join_factorization``, with ``optimize``): rule 7, then
   each candidate join's verified factorization (``join_factorization_run``), its verdict journaled
   per join. What the checks paid is counted in the query's usage (``settle``: ``Result.usage`` and
   ``Result.factorization_check``) and taken off the run's budget (``Settings.max_cost``);
4. **the plan**: the optimizer's (with ``policy``, tiers chosen by the cost model), or as written
   without ``optimize``; with ``measure``, the ``Planning`` that chooses it from measured statistics.

`explained_plan` is what EXPLAIN shows of the same steps without paying for a check: the code
choice, the factorization verdicts already journaled (and which joins the run would still check),
and the optimizer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from semray.cost_model.cardinality import source_statistics
from semray.errors import PlanError
from semray.log import get_logger
from semray.operators import Node
from semray.operators.base import quality_warnings
from semray.pipeline.runs.budget import BudgetError
from semray.pipeline.runs.measure_in_run import MeasureOptions, Planning
from semray.pipeline.runs.plan_time.code_choice import CodeChoice, choose_code_for_run
from semray.pipeline.runs.plan_time.code_commit import commit_code, pending_code
from semray.pipeline.runs.plan_time.join_factorization import FactorDecision, FactorizationChoice
from semray.pipeline.runs.plan_time.join_factorization_run import (
    choose_factorization_for_run,
    journaled_factorization,
)
from semray.serving.config import ServingConfig
from semray.settings import Settings
from semray.transactions import LLMUsage

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class PreparedRun:
    """What a query runs after its plan-time choices: ``plan`` (``planning`` re-plans it from measured
    statistics when set), the ``settings`` to run it with, and what the factorization check paid."""

    plan: Node
    settings: Settings
    planning: Planning | None = None
    factorization_check: LLMUsage = field(default_factory=LLMUsage)
    warnings: tuple[str, ...] = ()

    def settle(self, outcome: Any) -> Any:
        """A run's ``Result`` or ``Written`` with the check's usage counted in its ``usage`` (and
        shown apart as ``factorization_check``) and the plan's quality warnings."""
        paid = self.factorization_check
        update: dict[str, Any] = {"warnings": self.warnings} if self.warnings and hasattr(outcome, "warnings") else {}
        if paid.calls or paid.dollars:
            update.update(
                usage=outcome.usage + paid, attempt_usage=outcome.attempt_usage + paid, factorization_check=paid
            )
        return dataclasses.replace(outcome, **update) if update else outcome


def prepare_run(
    plan: Node, settings: Settings, serving: ServingConfig, *, optimize: bool, policy: Any, measure: Any
) -> PreparedRun:
    """Make ``plan``'s plan-time choices once (see the module docstring) and return what the run starts from."""
    warnings = quality_warnings(plan)
    for warning in warnings:
        log.info("quality_target_not_certifiable", message=warning)  # the CLI and EXPLAIN say it once
    if measure is not False and not optimize:
        raise PlanError("measure=True measures statistics for the optimizer; it needs optimize=True")
    if pending_code(plan):
        plan = commit_code(plan, settings, serving)
    plan, settings = _code_chosen(plan, settings, serving, optimize)
    paid = LLMUsage()
    if optimize and settings.join_factorization is not None:
        decision = factorize_joins(plan, settings, serving, FactorizationChoice(settings.join_factorization))
        plan, paid = decision.plan, decision.paid
        settings = _budget_left(settings, paid)
    if measure is not False:
        planning = _planning(plan, settings, serving, policy, measure)
        return PreparedRun(optimized(plan, settings, serving), settings, planning, paid, warnings)
    if policy is not None:
        return PreparedRun(optimized(plan, settings, serving, policy), settings, None, paid, warnings)
    return PreparedRun(optimized(plan, settings, serving) if optimize else plan, settings, None, paid, warnings)


def explained_plan(plan: Node, settings: Settings, serving: ServingConfig, optimize: bool) -> tuple[Node, str]:
    """The plan EXPLAIN shows as the one that runs, and its lines on the join factorization check:
    the code choice made (journaled), the verdicts already journaled applied, no check paid for."""
    plan, settings = _code_chosen(plan, settings, serving, optimize)
    if not optimize:
        return plan, ""
    target = settings.join_factorization
    if target is None:
        choice = optimized_choice(plan, settings, serving)
        return choice.plan, choice.explain()
    from semray.planner.rules.factorize_semantic_joins import factorize_semantic_joins

    decision, pending = journaled_factorization(
        factorize_semantic_joins(plan), settings, serving, FactorizationChoice(target)
    )
    lines = [line for line in decision.explain().splitlines() if line] + list(pending.values())
    text = f"\n\nJoin factorization check (Settings.join_factorization {target:g})\n" + "\n".join(lines)
    choice = optimized_choice(decision.plan, settings, serving)
    return choice.plan, (text if lines else "") + choice.explain()


def factorize_joins(
    plan: Node, settings: Settings, serving: ServingConfig, choice: FactorizationChoice
) -> FactorDecision:
    """Rule 7, then the checked factorization of ``plan``'s other candidate joins; one log line per join."""
    from semray.planner.rules.factorize_semantic_joins import factorize_semantic_joins

    decision = choose_factorization_for_run(factorize_semantic_joins(plan), settings, serving, choice)
    for line in decision.explain().splitlines():
        log.info("join_factorization_choice", decision=line)
    return decision


def optimized(
    plan: Node, settings: Settings, serving: ServingConfig | None = None, policy: Any = None, statistics: Any = None
) -> Node:
    """``plan`` after the optimizer: its rules and join ordering, with ``policy`` the tiers the
    cost model chooses on ``serving``'s prices (``Query.optimized``), and, given ``serving`` (or a
    policy), each cascade projected slower than the large tier alone run on the large tier
    (``optimized_choice``)."""
    chosen: Node = optimized_choice(plan, settings, serving, policy, statistics).plan
    return chosen


def optimized_choice(
    plan: Node, settings: Settings, serving: ServingConfig | None = None, policy: Any = None, statistics: Any = None
) -> Any:
    """`optimized`'s plan and its cascades' verdicts by projected wall time
    (``planner.cascade_wall_choice.WallChoice``: ``Settings.cascade_max_slowdown``); with neither
    ``serving`` nor ``policy`` no cascade is checked (nothing to price it on)."""
    from semray.cost_model.prices import profiles_from_serving
    from semray.planner import optimize
    from semray.planner.cascade_wall_choice import WallChoice, choose_cascades_by_wall_time, pinned_cascades

    labels = topic_labels(settings)
    if policy is None:
        chosen = optimize(plan, statistics, topic_labels=labels)
    else:
        chosen = optimize(
            plan, statistics, profiles_from_serving(serving or ServingConfig()), policy, topic_labels=labels
        )
    if serving is None and policy is None:
        return WallChoice(chosen)
    profiles = profiles_from_serving(serving or ServingConfig())
    return choose_cascades_by_wall_time(
        chosen, profiles, statistics, settings.cascade_max_slowdown, pinned_cascades(plan)
    )


def topic_labels(settings: Settings) -> Any:
    """The catalog's topic labels the optimizer prunes semantic filters by, or None (``Settings.topic_pruning``)."""
    if not settings.topic_pruning:
        return None
    from semray.catalog.topic_pruning import TopicLabels

    return TopicLabels(settings.catalog_path)


def _code_chosen(plan: Node, settings: Settings, serving: ServingConfig, optimize: bool) -> tuple[Node, Settings]:
    """``plan`` after the code choice ``Settings.code_choice`` asks for (a choice of the optimizer: not
    without ``optimize``), with settings that no longer ask for it; as given when the setting is off."""
    target = settings.code_choice
    if target is None or not optimize:
        return plan, settings
    chosen = choose_code_for_run(plan, settings, serving, CodeChoice(target)).plan
    return chosen, settings.model_copy(update={"code_choice": None})


def _budget_left(settings: Settings, paid: LLMUsage) -> Settings:
    """``settings`` with what the checks paid taken off the run's budget (``Settings.max_cost``)."""
    if settings.max_cost is None or not paid.dollars:
        return settings
    left = settings.max_cost - paid.dollars
    if left <= 0:
        raise BudgetError(
            f"the join factorization check paid ${paid.dollars:.4f}, all of the budget ${settings.max_cost:.4f}; "
            "raise --max-cost (Settings.max_cost): its verdicts are journaled, so the next run does not pay them again"
        )
    return settings.model_copy(update={"max_cost": left})


def _planning(plan: Node, settings: Settings, serving: ServingConfig, policy: Any, measure: Any) -> Planning:
    """How a measuring run chooses its plan: the optimizer under ``policy`` (``MinCost()`` unless given)
    on the measured statistics and the sources' stated row counts."""
    from semray.cost_model.policies import MinCost
    from semray.cost_model.prices import profiles_from_serving
    from semray.planner import optimize

    chosen = policy if policy is not None else MinCost()
    options = MeasureOptions() if measure is True else measure
    if not isinstance(options, MeasureOptions):
        raise PlanError(f"measure takes True or a MeasureOptions, not {type(measure).__name__}")
    profiles, labels = profiles_from_serving(serving), topic_labels(settings)

    def choose(statistics: Any) -> Node:
        from semray.planner.cascade_wall_choice import choose_cascades_by_wall_time, pinned_cascades

        merged = source_statistics(plan).merged(statistics)
        optimized_plan = optimize(plan, merged, profiles, chosen, topic_labels=labels)
        slowdown = settings.cascade_max_slowdown
        return choose_cascades_by_wall_time(optimized_plan, profiles, merged, slowdown, pinned_cascades(plan)).plan

    return Planning(choose=choose, options=options, policy=repr(chosen))
