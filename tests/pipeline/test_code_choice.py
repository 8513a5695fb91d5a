"""The optimizer's code choice at plan time: priced with the cost model, tried with a stand-in
large tier (recorded functions, per-row answers from a truth table), validated in the real
sandbox, journaled, and kept only when the agreement's lower confidence bound meets the target
(``test_code_choice_bound.py``: the rounds of that decision)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.prices import profiles_from_serving
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Limit, Node, Scan, Schema, SourceSpec
from semray.operators.code import SemCode
from semray.operators.semantic import ExtractField, SemExtract
from semray.pipeline.runs.plan_time.code_choice import CodeChoice, choose_code, choose_code_for_run
from semray.planner.explain_estimates import render_estimates
from semray.planner.rules.prefer_validated_code import trial_key
from semray.serving.config import ServingConfig
from semray.serving.contract import ModelRequest, ModelResponse, Usage
from semray.serving.prompts.code import CODE_SYSTEM
from semray.settings import Settings
from semray.transactions import begin_run

TRUTH = {
    "3 Jan 2024": "2024-01-03",
    "2024-02-05": "2024-02-05",
    "March 7, 2024": "2024-03-07",
    "07/04/2024": "2024-07-04",
}
GOOD = (
    "import pandas as pd\n"
    "def transform(batch):\n"
    "    days = pd.to_datetime(batch['raw'], format='mixed', errors='coerce')\n"
    "    return pd.DataFrame({'day': days.dt.date})\n"
)
DAY_FIRST = GOOD.replace("errors='coerce'", "dayfirst=True, errors='coerce'")  # 2 of the 4 rows wrong
RAW = list(TRUTH) * 50  # 200 rows: the choice validates in rounds of 20, up to 200
SAMPLE = pa.table({"_rowid": [str(i) for i in range(len(RAW))], "raw": RAW})
ACCEPTED_AT = 60
"""Rows a function agreeing on every row needs at the defaults (target 0.9, 95%, 10 looks of 20)."""
PROFILES = profiles_from_serving(ServingConfig())


class StandIn:
    """The large tier: code requests get ``replies`` in order, per-row requests the truth."""

    def __init__(self, replies: Sequence[str]) -> None:
        self.replies = iter(replies)
        self.code_calls = 0
        self.row_calls = 0

    def ask(self, requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        answers = []
        for request in requests:
            if request.system == CODE_SYSTEM:
                self.code_calls += 1
                value: dict[str, object] = {"code": next(self.replies)}
            else:
                self.row_calls += 1
                raw = next(text for text in TRUTH if text in request.prompt)
                value = {"day": TRUTH[raw]}
            usage = Usage(input_tokens=100, output_tokens=20, dollars=0.001)
            answers.append(ModelResponse(text=str(value), value=value, confidence=None, usage=usage, tier="large"))
        return answers


def extraction(rows: int | None = None) -> SemExtract:
    schema = Schema.of(("raw", "VARCHAR"))
    scan: Node = Scan(source=SourceSpec(kind="csv", path="/data/dates.csv"), source_schema=schema)
    if rows is not None:
        scan = Limit(input=scan, count=rows)
    day = ExtractField(name="day", type="date")
    return SemExtract(input=scan, instruction="The date written in {raw}", fields=(day,))


def test_a_function_that_agrees_is_chosen_and_explain_shows_it() -> None:
    model = StandIn([GOOD])
    decision = choose_code(extraction(), model.ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.9))
    assert isinstance(decision.plan, SemCode) and decision.plan.code == GOOD and decision.plan.agreement == 1.0
    assert decision.plan.checked_rows == ACCEPTED_AT and (decision.plan.agreement_bound or 0.0) >= 0.9
    assert decision.calls == 1 + ACCEPTED_AT and model.code_calls == 1 and model.row_calls == ACCEPTED_AT
    price = decision.prices[trial_key(extraction())]
    assert price.worth_trying and price.code < price.per_row  # 1,000 rows assumed: per-row calls dearer
    estimate = estimate_plan(decision.plan, PlanStatistics(), PROFILES)
    text = render_estimates(decision.plan, estimate)
    assert "instead of per-row SemExtract" in text and "validated on 60 rows, agreement 1.00" in text
    assert "95% lower bound 0.90 >= target 0.90" in text
    assert estimate.dollars.value == 0.0  # execution is CPU only


def test_a_function_below_the_target_leaves_the_per_row_operator() -> None:
    model = StandIn([DAY_FIRST, DAY_FIRST, DAY_FIRST])
    decision = choose_code(extraction(), model.ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.9))
    assert decision.plan == extraction()
    (trial,) = decision.trials.values()
    assert trial.code is None and trial.agreement == 0.5 and "below the 90% required" in (trial.problem or "")
    assert decision.calls == 3 + 20  # what the failed trial cost is still counted: one round of answers


def test_a_lower_target_accepts_the_same_function() -> None:
    decision = choose_code(extraction(), StandIn([DAY_FIRST]).ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.3))
    assert isinstance(decision.plan, SemCode) and decision.plan.agreement == 0.5
    assert decision.plan.checked_rows == 40  # 10 of 20 agree: the bound reaches 0.3 on the second round


def test_a_small_input_is_not_worth_a_function() -> None:
    model = StandIn([])
    decision = choose_code(extraction(rows=3), model.ask, lambda _: SAMPLE, PROFILES)
    assert decision.plan == extraction(rows=3) and model.code_calls == model.row_calls == 0
    assert "not less than" in decision.not_tried[trial_key(extraction())]


def test_a_journaled_trial_is_reused_without_calls(tmp_path: Path) -> None:
    run = begin_run(Settings(state_dir=tmp_path), {"plan": "test"}, None)
    first = choose_code(extraction(), StandIn([GOOD]).ask, lambda _: SAMPLE, PROFILES, ledger=run.ledger)
    again = StandIn([])  # any code request would fail
    second = choose_code(extraction(), again.ask, lambda _: SAMPLE, PROFILES, ledger=run.ledger)
    assert second.plan == first.plan and again.code_calls == again.row_calls == 0
    assert run.state().usage.calls == 1 + ACCEPTED_AT
    run.finish("succeeded")


def test_on_the_simulated_tier_the_plan_stays_per_row(tmp_path: Path) -> None:
    decision = choose_code_for_run(extraction(), Settings(state_dir=tmp_path), ServingConfig())
    assert decision.plan == extraction() and "cannot write code" in next(iter(decision.not_tried.values()))


def test_query_with_code_choice_runs_the_choice_on_its_tiers(tmp_path: Path) -> None:
    from semray.query import Query

    query = Query(extraction(), Settings(state_dir=tmp_path), ServingConfig())
    assert query.with_code_choice(0.95).plan == extraction()  # the simulated large tier writes no code
