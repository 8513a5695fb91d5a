"""The code choice's statistical decision: a function is kept when the one-sided Wilson lower
bound (95%, Bonferroni over the looks) on its agreement reaches the target; more rounds of rows
are answered while the bound is undecided, up to the cap, each round journaled and priced."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from semray.cost_model.bounds import agreement_lower_bound, look_confidence
from semray.cost_model.code_cost import validation_rows
from semray.cost_model.estimates import Interval
from semray.cost_model.prices import profiles_from_serving
from semray.operators import Node, Scan, Schema, SourceSpec
from semray.operators.code import SemCode
from semray.operators.semantic import ExtractField, SemExtract
from semray.pipeline.runs.plan_time.code_choice import CodeChoice, choose_code
from semray.serving.config import ServingConfig
from semray.serving.contract import ModelRequest, ModelResponse, Usage
from semray.serving.prompts.code import CODE_SYSTEM
from semray.settings import Settings
from semray.transactions import begin_run

ROWS = 200
SAMPLE = pa.table({"_rowid": [str(i) for i in range(ROWS)], "raw": [f"n{i}" for i in range(ROWS)]})
PROFILES = profiles_from_serving(ServingConfig())


def function(wrong: str) -> str:
    """A function giving ``n`` for ``n<n>``, and -1 where ``wrong`` (an expression of ``n``) holds."""
    return (
        "import pandas as pd\n"
        "def transform(batch):\n"
        "    def one(raw):\n"
        "        n = int(raw[1:])\n"
        f"        return -1 if ({wrong}) else n\n"
        "    return pd.DataFrame({'v': [one(raw) for raw in batch['raw']]})\n"
    )


class StandIn:
    """The large tier: code requests get ``replies`` in order; a per-row request the row's number."""

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
                found = re.search(r"\bn(\d+)\b", request.prompt)
                assert found is not None
                value = {"v": int(found.group(1))}
            usage = Usage(input_tokens=100, output_tokens=20, dollars=0.001)
            answers.append(ModelResponse(text=str(value), value=value, confidence=None, usage=usage, tier="large"))
        return answers


def extraction() -> SemExtract:
    scan: Node = Scan(source=SourceSpec(kind="csv", path="/data/n.csv"), source_schema=Schema.of(("raw", "VARCHAR")))
    return SemExtract(input=scan, instruction="The number in {raw}", fields=(ExtractField(name="v", type="int"),))


def test_code_that_agrees_on_every_row_is_accepted_once_the_bound_reaches_the_target() -> None:
    model = StandIn([function("False")])
    decision = choose_code(extraction(), model.ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.9))
    assert isinstance(decision.plan, SemCode) and decision.plan.agreement == 1.0
    # 20 and 40 agreeing rows leave the bound below 0.9 at 99.5% per look; 60 reach it
    assert agreement_lower_bound(40, 40, look_confidence(0.95, 10)) < 0.9
    assert decision.plan.checked_rows == 60 and model.row_calls == 60 and decision.calls == 61
    bound = decision.plan.agreement_bound
    assert bound is not None and bound >= 0.9 and bound == agreement_lower_bound(60, 60, look_confidence(0.95, 10))
    assert "validated on 60 rows, agreement 1.00, 95% lower bound 0.90 >= target 0.90" in decision.plan.label()


def test_code_that_agrees_on_85_percent_is_refused_for_a_target_of_090() -> None:
    wrong = function("n % 20 in (3, 7, 11)")  # 17 of every 20 rows agree
    model = StandIn([wrong, wrong, wrong])
    decision = choose_code(extraction(), model.ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.9))
    assert decision.plan == extraction()
    (trial,) = decision.trials.values()
    assert trial.code is None and trial.agreement == 0.85 and model.code_calls == 3


def test_code_whose_later_rounds_fall_to_85_percent_is_refused_by_the_bound() -> None:
    # the first round agrees on all 20 rows (it passes the retry loop's check); the others on 17 of 20
    model = StandIn([function("n >= 20 and n % 20 in (3, 7, 11)")])
    decision = choose_code(extraction(), model.ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.9))
    assert decision.plan == extraction() and model.code_calls == 1
    (trial,) = decision.trials.values()
    assert trial.code is None and "lower bound" in (trial.problem or "") and "below the target 0.90" in trial.problem
    assert trial.agreement is not None and trial.agreement < 0.9
    assert model.row_calls == trial.sample_rows > 60  # it took rounds past the perfect case's 60 rows


def test_a_borderline_function_takes_more_rounds_before_it_is_accepted() -> None:
    model = StandIn([function("n % 20 == 5")])  # 19 of every 20 rows agree
    decision = choose_code(extraction(), model.ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.8))
    assert isinstance(decision.plan, SemCode) and decision.plan.agreement == 0.95
    rows = decision.plan.checked_rows
    assert rows is not None and rows > 20 and rows % 20 == 0 and model.row_calls == rows
    per_look = look_confidence(0.95, 10)
    assert agreement_lower_bound(rows - rows // 20 - 19, rows - 20, per_look) < 0.8  # one round fewer: undecided
    assert (decision.plan.agreement_bound or 0.0) >= 0.8
    perfect = StandIn([function("False")])
    choose_code(extraction(), perfect.ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.8))
    assert perfect.row_calls < rows


def test_the_cap_bounds_the_rounds() -> None:
    model = StandIn([function("n % 20 == 5")])
    choice = CodeChoice(target=0.9, sample_rows=20, max_rows=40)
    decision = choose_code(extraction(), model.ask, lambda _: SAMPLE, PROFILES, choice)
    assert decision.plan == extraction() and model.row_calls == 40
    (trial,) = decision.trials.values()
    assert trial.code is None and "undecided at the cap" in (trial.problem or "")


def test_every_round_is_journaled_priced_and_reused(tmp_path: Path) -> None:
    run = begin_run(Settings(state_dir=tmp_path), {"plan": "bound test"}, None)
    model = StandIn([function("n % 20 == 5")])
    choice = CodeChoice(target=0.8)
    first = choose_code(extraction(), model.ask, lambda _: SAMPLE, PROFILES, choice, ledger=run.ledger)
    assert isinstance(first.plan, SemCode) and first.plan.checked_rows is not None
    rounds = first.plan.checked_rows // 20
    committed = run.state().committed
    assert sum(1 for operator, _ in committed if operator.startswith("code_rows:")) == rounds
    assert run.state().usage.calls == 1 + first.plan.checked_rows == first.calls
    assert abs(run.state().usage.dollars - first.dollars) < 1e-9
    again = StandIn([])
    second = choose_code(extraction(), again.ask, lambda _: SAMPLE, PROFILES, choice, ledger=run.ledger)
    assert second.plan == first.plan and again.code_calls == again.row_calls == 0
    run.finish("succeeded")


def test_the_draft_is_priced_for_the_rounds() -> None:
    from semray.pipeline.runs.plan_time.code_choice import price_alternatives

    one_round = price_alternatives(extraction(), CodeChoice(max_rows=20), PROFILES)
    rounds = price_alternatives(extraction(), CodeChoice(max_rows=200), PROFILES)
    (small,), (large,) = one_round.values(), rounds.values()
    assert large.code > small.code and large.code_high > small.code_high
    draft = SemCode(
        input=extraction().input,
        instruction="The number in {raw}",
        inputs=("raw",),
        outputs=(ExtractField(name="v", type="int"),),
        sample_rows=20,
        max_sample_rows=200,
    )
    rows = validation_rows(draft, Interval(1000.0, 500.0, 5000.0))
    assert (rows.low, rows.value, rows.high) == (20.0, 60.0, 200.0)  # one round, a perfect function's 60, the cap
    one = validation_rows(draft.model_copy(update={"max_sample_rows": None}), Interval(1000.0, 500.0, 5000.0))
    assert (one.low, one.value, one.high) == (20.0, 20.0, 20.0)


def test_an_interrupted_trial_resumes_without_asking_its_journaled_rounds_again(tmp_path: Path) -> None:
    run = begin_run(Settings(state_dir=tmp_path), {"plan": "bound resume"}, None)
    broken = StandIn([])  # answers the first round, then fails on the code request
    with pytest.raises(StopIteration):
        choose_code(extraction(), broken.ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.9), ledger=run.ledger)
    assert broken.row_calls == 20
    model = StandIn([function("False")])
    decision = choose_code(extraction(), model.ask, lambda _: SAMPLE, PROFILES, CodeChoice(), ledger=run.ledger)
    assert isinstance(decision.plan, SemCode) and decision.plan.checked_rows == 60
    assert model.row_calls == 40 and run.state().usage.calls == 20 + 1 + 40
    run.finish("succeeded")
