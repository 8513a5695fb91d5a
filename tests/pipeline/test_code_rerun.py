"""Re-running a query whose functions a finished run committed: the same code, no model call, no
tier started (``open_run`` resumes only interrupted and failed runs, so this is looked up)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_code_choice import GOOD, SAMPLE, StandIn, extraction

from semray.operators import plan_to_json
from semray.operators.code import SemCode
from semray.operators.semantic import ExtractField
from semray.pipeline.runs.plan_time.code_choice import (
    CodeChoice,
    choice_run_identity,
    choose_code,
    choose_code_for_run,
)
from semray.pipeline.runs.plan_time.code_commit import code_run_identity, commit_code, commit_with
from semray.serving.config import Prices, ServingConfig, TierConfig
from semray.settings import Settings
from semray.transactions import begin_run

PRICES = Prices(input_per_million=2.5, output_per_million=10.0)
REAL = ServingConfig(
    large=TierConfig(backend="openai", model="recorded-large", base_url="http://127.0.0.1:9/v1", prices=PRICES)
)


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("a re-run of committed code must not connect or start tiers")

    monkeypatch.setattr("semray.cluster.connect.connect", refuse)
    monkeypatch.setattr("semray.serving.deployments.start_tiers", refuse)


def pending() -> SemCode:
    return SemCode(
        input=extraction().input,
        instruction="The date written in {raw}",
        inputs=("raw",),
        outputs=(ExtractField(name="day", type="date"),),
    )


def finished_run(settings: Settings, identity: str, plan: Any) -> Any:
    return begin_run(settings, json.loads(plan_to_json(plan, indent=None)), None, plan_fingerprint=identity)


def test_committed_functions_of_a_finished_run_are_reused(tmp_path: Path, no_cluster: None) -> None:
    settings = Settings(state_dir=tmp_path)
    run = finished_run(settings, code_run_identity(pending(), REAL), pending())
    committed = commit_with(pending(), StandIn([GOOD]).ask, run.ledger, lambda _: SAMPLE)
    run.finish("succeeded")
    again = commit_code(pending(), settings, REAL)
    assert again == committed and isinstance(again, SemCode) and again.code == GOOD


def test_trials_of_a_finished_choice_are_reused(tmp_path: Path, no_cluster: None) -> None:
    settings, choice = Settings(state_dir=tmp_path), CodeChoice()
    run = finished_run(settings, choice_run_identity(extraction(), REAL, choice), extraction())
    from semray.cost_model.prices import profiles_from_serving

    first = choose_code(
        extraction(), StandIn([GOOD]).ask, lambda _: SAMPLE, profiles_from_serving(REAL), choice, ledger=run.ledger
    )
    run.finish("succeeded")
    again = choose_code_for_run(extraction(), settings, REAL, choice)
    assert isinstance(again.plan, SemCode) and again.plan == first.plan


def test_a_failed_run_is_not_taken_as_committed(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    run = finished_run(settings, code_run_identity(pending(), REAL), pending())
    run.finish("failed")
    from semray.pipeline.runs.plan_time.code_commit import succeeded_lookup

    assert succeeded_lookup(settings, code_run_identity(pending(), REAL)) is None


def test_trials_are_reused_for_the_same_operator_under_a_limit_or_a_filter(tmp_path: Path, no_cluster: None) -> None:
    """The choice is keyed by its candidates (each with its inputs), not by the whole plan: the same
    extraction under a LIMIT or a filter finds its trial journaled, with no call and no tier."""
    from semray.cost_model.prices import profiles_from_serving
    from semray.operators import Filter, Limit

    settings, choice = Settings(state_dir=tmp_path), CodeChoice()
    run = finished_run(settings, choice_run_identity(extraction(), REAL, choice), extraction())
    profiles = profiles_from_serving(REAL)
    first = choose_code(extraction(), StandIn([GOOD]).ask, lambda _: SAMPLE, profiles, choice, ledger=run.ledger)
    run.finish("succeeded")
    assert isinstance(first.plan, SemCode)
    for around in (Limit(input=extraction(), count=500), Filter(input=extraction(), predicate="day IS NOT NULL")):
        again = choose_code_for_run(around, settings, REAL, choice)
        reused = again.plan.children[0]
        assert isinstance(reused, SemCode) and not again.not_tried, again.not_tried
        assert reused.model_dump() == first.plan.model_dump()  # the function and its measured bound
    other = extraction().model_copy(update={"instruction": "The day written in {raw}"})
    assert choice_run_identity(other, REAL, choice) != choice_run_identity(extraction(), REAL, choice)
