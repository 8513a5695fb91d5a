"""`choose_factorization` on the configured tiers: each candidate join checked in a journaled run of its own.

A join's check run is keyed by the join alone (`join_identity`: its predicate and both inputs,
as the join's own JSON document with the content digest of every in-memory table it reads, the
tiers it asks with their models, and the choice with its target), not by the query around it.
So the same join under another LIMIT, under another filter, or in another query finds the
verdict of the newest succeeded run with that identity (``succeeded_lookup``) and pays nothing,
starts no tier and opens no run (its trial says ``reused``). A join that could not be
factorized (too small, no detected form, no proposal possible, a right side too large to be the
labels) opens no run at all.

What the checks paid is ``FactorDecision.paid``; the query adds it to its ``Result.usage``
(``factorization_check``). Under a budget (``Settings.max_cost``) a check whose worst case
(`check_worst_case`: every pair it may draw and every sampled row, priced by the cost model
as the join's pairs) would take the checks past it is not started: ``BudgetError``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import pyarrow as pa

from semray.cost_model.cardinality import row_bound
from semray.cost_model.estimates import EstimateError
from semray.log import get_logger
from semray.operators import Limit, Node, plan_to_json
from semray.operators.semantic import SemJoin
from semray.pipeline.lowering.set_ops import side_columns
from semray.pipeline.runs.budget import BudgetError, suggested_budget
from semray.pipeline.runs.plan_time.code_commit import memory_digests, succeeded_lookup
from semray.pipeline.runs.plan_time.join_factor_check import Ask
from semray.pipeline.runs.plan_time.join_factorization import (
    DEFAULT_CHOICE,
    PROPOSAL_TIER,
    FactorDecision,
    FactorizationChoice,
    FactorTrial,
    apply_trials,
    factor_candidates,
    not_worth_trying,
    trial_join,
)
from semray.planner.join_factors import detect_factorization, find_factorization
from semray.serving.config import ServingConfig
from semray.settings import Settings
from semray.transactions import LLMUsage, Run

log = get_logger(__name__)


def choose_factorization_for_run(
    plan: Node, settings: Settings, serving: ServingConfig | None, choice: FactorizationChoice = DEFAULT_CHOICE
) -> FactorDecision:
    """`choose_factorization` on the configured tiers, each candidate join's check a journaled run of its own."""
    candidates = factor_candidates(plan)
    if not candidates:
        return FactorDecision(plan=plan)
    config = serving or ServingConfig()
    propose = config.tier(PROPOSAL_TIER).backend != "simulated"
    if not propose:
        log.info("factorization_proposal_unavailable", reason="the large tier is simulated", candidates=len(candidates))
    trials: dict[str, FactorTrial] = {}
    paid = LLMUsage()
    for path, join in candidates.items():
        if not _may_factorize(join, choice, propose):
            # Too small, or nothing to verify: the same verdict without a call, a sample or a run.
            trials[path] = trial_join(join, _needs_model, _nothing_sampled, choice, propose=propose)
            continue
        trials[path], cost = _check(join, settings, config, choice, propose, spent=paid.dollars)
        paid += cost
    return dataclasses.replace(apply_trials(plan, candidates, trials), paid=paid)


def journaled_factorization(
    plan: Node, settings: Settings, serving: ServingConfig | None, choice: FactorizationChoice = DEFAULT_CHOICE
) -> tuple[FactorDecision, dict[str, str]]:
    """The verdicts already journaled for ``plan``'s candidate joins, applied, with no call and no run
    (EXPLAIN); and, by path, why each other candidate would still be checked when the query runs."""
    candidates = factor_candidates(plan)
    config = serving or ServingConfig()
    propose = config.tier(PROPOSAL_TIER).backend != "simulated"
    trials: dict[str, FactorTrial] = {}
    pending: dict[str, str] = {}
    for path, join in candidates.items():
        if not _may_factorize(join, choice, propose):
            trials[path] = trial_join(join, _needs_model, _nothing_sampled, choice, propose=propose)
            continue
        earlier = succeeded_lookup(settings, join_identity(join, config, choice, _tiers(join, propose)))
        try:
            if earlier is not None:
                trials[path] = trial_join(join, _needs_model, _needs_model, choice, propose=propose, earlier=earlier)
                continue
        except _NeedsModelError:
            pass
        worst = check_worst_case(join, config, choice, propose)
        cost = f", about ${worst[1]:.4f}" if worst is not None else ""
        shown = f"SemJoin {join.instruction!r}: no verdict journaled; the run checks it first"
        pending[path] = f"{shown} (at most {check_calls(join, choice, propose)} calls{cost})"
    decision = apply_trials(plan, {path: candidates[path] for path in trials}, trials)
    return decision, pending


def join_identity(join: SemJoin, serving: ServingConfig, choice: FactorizationChoice, tiers: Sequence[str]) -> str:
    """The fingerprint of ``join``'s check run: the join's document (its predicate, tier and both inputs),
    the content of the in-memory tables it reads, the models of ``tiers`` and ``choice`` (its target)."""
    from semray.transactions import fingerprint

    document: dict[str, Any] = json.loads(plan_to_json(join, indent=None))
    models = {tier: f"{serving.tier(tier).backend}:{serving.tier(tier).model}" for tier in tiers}
    return fingerprint(
        {"factor_join": document, "memory": memory_digests(join), "choice": asdict(choice), "models": models}
    )


def check_calls(join: SemJoin, choice: FactorizationChoice, propose: bool) -> int:
    """The most calls ``join``'s check can make: every pair drawn, every sampled row, and the proposal."""
    left, right = (_sampled_rows(side, choice) for side in (join.left, join.right))
    return choice.worst_calls(left, right) + (1 if propose else 0)


def check_worst_case(
    join: SemJoin, serving: ServingConfig, choice: FactorizationChoice, propose: bool
) -> tuple[int, float] | None:
    """The most calls ``join``'s check can make, and their dollars as the cost model prices one of the
    join's pair questions on its tier (a side question is shorter; the proposal is priced alike);
    None when the cost model cannot price the join."""
    from semray.cost_model.cardinality import source_statistics
    from semray.cost_model.plan_cost import estimate_plan
    from semray.cost_model.prices import profiles_from_serving

    left, right = (_sampled_rows(side, choice) for side in (join.left, join.right))
    probe = SemJoin(
        left=Limit(input=join.left, count=left),
        right=Limit(input=join.right, count=right),
        instruction=join.instruction,
        tier=join.tier,
        implementation="nested",
    )
    try:
        estimate = estimate_plan(probe, source_statistics(probe), profiles_from_serving(serving)).operator("")
    except EstimateError as error:
        log.info("factor_check_not_priced", instruction=join.instruction, reason=str(error))
        return None
    calls = check_calls(join, choice, propose)
    pairs = estimate.rows_in.value
    return calls, (estimate.dollars.value / pairs * calls if pairs else 0.0)


def _check(
    join: SemJoin, settings: Settings, config: ServingConfig, choice: FactorizationChoice, propose: bool, spent: float
) -> tuple[FactorTrial, LLMUsage]:
    """``join``'s trial: its journaled verdict, else a check run of its own (within the budget); what it paid."""
    tiers = _tiers(join, propose)
    identity = join_identity(join, config, choice, tiers)
    earlier = succeeded_lookup(settings, identity)
    if earlier is not None:
        try:  # the verdict a finished check of this join made: no call, no tier started
            return trial_join(join, _needs_model, _needs_model, choice, propose=propose, earlier=earlier), LLMUsage()
        except _NeedsModelError:
            pass
    _within_budget(join, settings, config, choice, propose, spent)

    def sample(side: Node, rows: int) -> pa.Table:
        from semray.pipeline.runs.execute import collect

        return collect(Limit(input=side, count=rows), settings, config)

    document: dict[str, Any] = json.loads(plan_to_json(join, indent=None))
    with _factor_run(settings, config, document, identity, tiers) as (ask, run):
        before = run.state().usage
        trial = trial_join(join, ask, sample, choice, propose=propose, ledger=run.ledger, earlier=earlier)
        after = run.state().usage
    return trial, _difference(after, before)


def _within_budget(
    join: SemJoin, settings: Settings, config: ServingConfig, choice: FactorizationChoice, propose: bool, spent: float
) -> None:
    """Raise ``BudgetError`` when ``join``'s check could take what the checks spent past ``Settings.max_cost``."""
    budget = settings.max_cost
    if budget is None:
        return
    worst = check_worst_case(join, config, choice, propose)
    if worst is None or spent + worst[1] <= budget:
        return
    calls, dollars = worst
    earlier = f" after ${spent:.4f} spent on other joins' checks" if spent else ""
    raise BudgetError(
        f"the join factorization check of SemJoin {join.instruction!r} may make {calls} calls, about ${dollars:.4f}"
        f"{earlier}, over the budget ${budget:.4f}; raise it with --max-cost {suggested_budget(spent + dollars)} "
        "(Settings.max_cost), or give the join an implementation (it is then not checked)"
    )


@contextmanager
def _factor_run(
    settings: Settings, config: ServingConfig, document: dict[str, Any], identity: str, tiers: Sequence[str]
) -> Iterator[tuple[Ask, Run]]:
    from semray.cluster.connect import connect
    from semray.serving.deployments import start_tiers
    from semray.transactions import open_run

    run = open_run(
        settings,
        document,
        None,
        config={"purpose": "join_factorization", "tiers": list(tiers)},
        plan_fingerprint=identity,
    )
    with run:
        connect(settings)
        handles = start_tiers(config, settings, tiers=list(tiers))

        def ask(tier: str, requests: Sequence[Any]) -> Any:
            return handles.generate(tier, list(requests))

        yield ask, run


def _tiers(join: SemJoin, propose: bool) -> list[str]:
    return sorted({join.resolved_tier()} | ({PROPOSAL_TIER} if propose else set()))


def _sampled_rows(side: Node, choice: FactorizationChoice) -> int:
    bound = row_bound(side)
    return choice.sample_rows if bound is None else min(bound, choice.sample_rows)


def _difference(after: LLMUsage, before: LLMUsage) -> LLMUsage:
    return LLMUsage(
        calls=after.calls - before.calls,
        tokens_in=after.tokens_in - before.tokens_in,
        tokens_out=after.tokens_out - before.tokens_out,
        dollars=max(0.0, after.dollars - before.dollars),
    )


def _may_factorize(join: SemJoin, choice: FactorizationChoice, propose: bool) -> bool:
    """Whether a trial could find a candidate (a detected form, a proposal, a small right side)."""
    if not_worth_trying(join, choice, row_bound) is not None:
        return False
    if propose or detect_factorization(join.instruction) or find_factorization(join.instruction):
        return True
    right = row_bound(join.right)
    return len(side_columns(join, "r")) == 1 and (right is None or right <= choice.right_labels_max)


def _nothing_sampled(side: Node, rows: int) -> pa.Table:
    return pa.table({})  # no candidate, or a right side too large to be the labels


class _NeedsModelError(Exception):
    """A trial the finished run did not journal: the choice needs the tiers after all."""


def _needs_model(*_: Any) -> Any:
    raise _NeedsModelError
