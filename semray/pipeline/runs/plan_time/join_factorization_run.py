"""`choose_factorization` on the configured tiers, as one journaled run (``semray runs ls``).

The run's fingerprint is the plan, the choice and the models of the tiers it asks; a re-run of a
finished choice over file sources finds every trial in that run (``succeeded_lookup``) and starts
no tier. A plan with no join that could be factorized (too small, no detected form, no proposal
possible, a right side too large to be the labels) opens no run at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import pyarrow as pa

from semray.cost_model.cardinality import row_bound
from semray.log import get_logger
from semray.operators import Limit, Node, plan_to_json
from semray.operators.semantic import SemJoin
from semray.pipeline.lowering.set_ops import side_columns
from semray.pipeline.runs.plan_time.code_commit import reads_memory, succeeded_lookup
from semray.pipeline.runs.plan_time.join_factor_check import Ask
from semray.pipeline.runs.plan_time.join_factorization import (
    DEFAULT_CHOICE,
    PROPOSAL_TIER,
    FactorDecision,
    FactorizationChoice,
    choose_factorization,
    factor_candidates,
    not_worth_trying,
)
from semray.planner.join_factors import detect_factorization, find_factorization
from semray.serving.config import ServingConfig
from semray.settings import Settings
from semray.transactions import BatchLedger

log = get_logger(__name__)


def choose_factorization_for_run(
    plan: Node, settings: Settings, serving: ServingConfig | None, choice: FactorizationChoice = DEFAULT_CHOICE
) -> FactorDecision:
    """`choose_factorization` on the configured tiers, as one journaled run (``semray runs ls``)."""
    candidates = factor_candidates(plan)
    if not candidates:
        return FactorDecision(plan=plan)
    config = serving or ServingConfig()
    propose = config.tier(PROPOSAL_TIER).backend != "simulated"
    if not propose:
        log.info("factorization_proposal_unavailable", reason="the large tier is simulated", candidates=len(candidates))
    if not any(_may_factorize(join, choice, propose) for join in candidates.values()):
        # Too small, or nothing to verify: the same decision without a call, a sample or a run.
        return choose_factorization(plan, _needs_model, _nothing_sampled, choice, propose=propose)
    tiers = sorted({join.resolved_tier() for join in candidates.values()} | ({PROPOSAL_TIER} if propose else set()))
    document: dict[str, Any] = json.loads(plan_to_json(plan, indent=None))
    identity = _identity(document, config, choice, tiers)
    earlier = None if reads_memory(document) else succeeded_lookup(settings, identity)

    def sample(side: Node, rows: int) -> pa.Table:
        from semray.pipeline.runs.execute import collect

        return collect(Limit(input=side, count=rows), settings, serving)

    if earlier is not None:
        try:  # a re-run of a choice a finished run made: its trials, no call, no tier started
            return choose_factorization(plan, _needs_model, _needs_model, choice, propose=propose, earlier=earlier)
        except _NeedsModelError:
            pass
    with _factor_run(settings, config, document, identity, tiers) as (ask, ledger):
        return choose_factorization(plan, ask, sample, choice, propose=propose, ledger=ledger, earlier=earlier)


@contextmanager
def _factor_run(
    settings: Settings, config: ServingConfig, document: dict[str, Any], identity: str, tiers: Sequence[str]
) -> Iterator[tuple[Ask, BatchLedger]]:
    from semray.cluster.connect import connect
    from semray.serving.deployments import start_tiers
    from semray.transactions import open_run

    run = open_run(
        settings,
        document,
        None,
        config={"purpose": "join_factorization", "tiers": list(tiers)},
        plan_fingerprint=identity,
        resume=not reads_memory(document),
    )
    with run:
        connect(settings)
        handles = start_tiers(config, settings, tiers=list(tiers))

        def ask(tier: str, requests: Sequence[Any]) -> Any:
            return handles.generate(tier, list(requests))

        yield ask, run.ledger


def _identity(
    document: dict[str, Any], serving: ServingConfig, choice: FactorizationChoice, tiers: Sequence[str]
) -> str:
    from semray.transactions import fingerprint

    models = {tier: f"{serving.tier(tier).backend}:{serving.tier(tier).model}" for tier in tiers}
    return fingerprint({"choose_factorization": document, "choice": asdict(choice), "models": models})


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
