"""An operator's own quality target is the bar of the code choice: its function replaces the
per-row calls only when the agreement's lower bound reaches that target (at ``1 - delta``),
whether it is stricter or looser than the query's; stand-in large tier and recorded functions as
in ``test_code_choice.py``, validation in the real sandbox."""

from __future__ import annotations

from test_code_choice import ACCEPTED_AT, DAY_FIRST, GOOD, PROFILES, SAMPLE, StandIn, extraction

from semray.operators.code import SemCode
from semray.operators.semantic import QualityTarget, SemExtract
from semray.pipeline.runs.plan_time.code_choice import CodeChoice, choose_code
from semray.planner.rules.prefer_validated_code import trial_key


def own(level: float, delta: float = 0.05) -> SemExtract:
    """The dates extraction with a quality target of its own."""
    node, target = extraction(), QualityTarget(level=level, delta=delta)
    return SemExtract(input=node.input, instruction=node.instruction, fields=node.fields, quality=target)


def test_agreement_above_the_operators_target_chooses_the_function() -> None:
    model = StandIn([GOOD])
    decision = choose_code(own(0.95), model.ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.9))
    assert isinstance(decision.plan, SemCode) and decision.plan.code == GOOD
    assert decision.plan.min_agreement == 0.95 and (decision.plan.agreement_bound or 0.0) >= 0.95
    # the bar is the operator's: 0.95 needs more agreeing rows than the query's 0.9 would
    assert decision.plan.checked_rows > ACCEPTED_AT and model.row_calls == decision.plan.checked_rows
    assert "target 0.95" in decision.plan.label()


def test_agreement_below_the_operators_target_keeps_the_per_row_model() -> None:
    # the query's target (0.3) accepts this function (test_code_choice: a lower target accepts it)
    decision = choose_code(own(0.9), StandIn([DAY_FIRST] * 3).ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.3))
    assert decision.plan == own(0.9)
    (trial,) = decision.trials.values()
    assert trial.code is None and trial.target == 0.9 and trial.agreement == 0.5


def test_the_operators_stricter_target_applies_over_the_querys() -> None:
    query_only = choose_code(extraction(), StandIn([DAY_FIRST]).ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.3))
    assert isinstance(query_only.plan, SemCode)  # at the query's target alone the function is chosen
    strict = choose_code(own(0.6), StandIn([DAY_FIRST] * 3).ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.3))
    assert strict.plan == own(0.6)  # the operator's 0.6 refuses 50% agreement


def test_the_operators_looser_target_applies_over_the_querys() -> None:
    decision = choose_code(own(0.3), StandIn([DAY_FIRST]).ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.9))
    assert isinstance(decision.plan, SemCode) and decision.plan.min_agreement == 0.3 and decision.plan.agreement == 0.5


def test_the_operators_delta_sets_the_bounds_confidence() -> None:
    model = StandIn([GOOD])
    decision = choose_code(own(0.9, delta=0.01), model.ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.9))
    assert isinstance(decision.plan, SemCode) and decision.plan.confidence == 0.99
    assert decision.plan.checked_rows > ACCEPTED_AT  # 99% needs more rows than the query's 95%
    assert "99% lower bound" in decision.plan.label()


def test_a_target_no_sample_can_show_is_not_tried() -> None:
    model = StandIn([])
    decision = choose_code(own(0.99), model.ask, lambda _: SAMPLE, PROFILES, CodeChoice(target=0.9))
    assert decision.plan == own(0.99) and model.code_calls == model.row_calls == 0
    assert "could not show agreement >= 0.99" in decision.not_tried[trial_key(own(0.99))]
