"""The code choice rule: a candidate becomes a validated SemCode only with a trial that met its
target; without trials (the optimizer's plain context) it changes nothing."""

from __future__ import annotations

import pytest

from semray.operators import Filter, Scan, Schema, SourceSpec, render_tree
from semray.operators.code import SemCode
from semray.operators.semantic import ExtractField, QualityTarget, SemClassify, SemExtract, SemMap
from semray.planner import rules
from semray.planner.rules import RULES
from semray.planner.rules.prefer_validated_code import (
    CodeRuleContext,
    CodeTrial,
    code_candidate,
    prefer_validated_code,
    trial_key,
)

CODE = (
    "import pandas as pd\n"
    "def transform(batch):\n"
    "    return pd.DataFrame({'day': pd.to_datetime(batch['raw']).dt.date})\n"
)


def scan() -> Scan:
    schema = Schema.of(("raw", "VARCHAR"), ("n", "BIGINT"))
    return Scan(source=SourceSpec(kind="csv", path="/data/dates.csv"), source_schema=schema)


def extract(**overrides: object) -> SemExtract:
    fields: dict[str, object] = {
        "input": scan(),
        "instruction": "The date written in {raw}",
        "fields": (ExtractField(name="day", type="date"),),
    }
    return SemExtract(**{**fields, **overrides})  # type: ignore[arg-type]


def trials(**by_instruction: CodeTrial) -> CodeRuleContext:
    return CodeRuleContext(code_trial=lambda node: by_instruction.get(getattr(node, "instruction", "")[:3]))


PASSED = CodeTrial(CODE, 0.95, 0.9, 20, calls=21, dollars=0.01)


def test_a_trial_that_met_its_target_replaces_the_per_row_operator() -> None:
    plan = Filter(input=extract(), predicate="n > 1")
    chosen = prefer_validated_code(plan, trials(The=PASSED))
    code = chosen.children[0]
    assert isinstance(code, SemCode), render_tree(chosen)
    assert code.code == CODE and code.origin == "generated" and code.agreement == 0.95 and code.min_agreement == 0.9
    assert code.inputs == ("raw",) and code.output_schema == plan.children[0].output_schema
    assert chosen.output_schema == plan.output_schema
    label = code.label()
    assert "agreement 0.95 >= target 0.90" in label and "instead of per-row SemExtract" in label
    assert prefer_validated_code(chosen, trials(The=PASSED)) == chosen  # idempotent: no candidate left


def test_a_map_becomes_code_with_its_typed_output() -> None:
    node = SemMap(input=scan(), instruction="The date written in {raw}", output="day", output_type="date")
    chosen = prefer_validated_code(node, trials(The=PASSED))
    assert isinstance(chosen, SemCode) and chosen.output_types() == (("day", "date"),)
    assert chosen.output_schema == node.output_schema


@pytest.mark.parametrize(
    "trial",
    [
        CodeTrial(CODE, 0.85, 0.9, 20),  # below the target
        CodeTrial(None, 0.85, 0.9, 20, problem="agrees on 85%"),  # no function passed
        CodeTrial(CODE, None, 0.9, 20),  # the model answered no sample row: nothing measured
    ],
)
def test_a_trial_below_its_target_keeps_the_per_row_operator(trial: CodeTrial) -> None:
    assert prefer_validated_code(extract(), trials(The=trial)) == extract()


def test_without_trials_nothing_changes() -> None:
    assert prefer_validated_code(extract(), rules.EMPTY_CONTEXT) == extract()
    assert prefer_validated_code(extract(), CodeRuleContext()) == extract()


@pytest.mark.parametrize(
    "node",
    [
        extract(tier="small"),
        extract(diagnostics=True),
        extract(on_error="skip"),
        SemMap(input=scan(), instruction="Rate {raw}", output="stars", output_type="int", lo=1.0, hi=5.0),
        SemClassify(input=scan(), instruction="{raw}", labels=("a", "b")),
    ],
)
def test_only_plain_row_wise_maps_and_extractions_are_candidates(node: object) -> None:
    assert not code_candidate(node)  # type: ignore[arg-type]


def test_an_operator_with_its_own_target_is_a_candidate_held_to_that_target() -> None:
    strict = extract(quality=QualityTarget(level=0.97))
    assert code_candidate(strict) and "[code agreement>=0.97 delta=0.05]" in strict.label()
    measured_at_query_target = CodeTrial(CODE, 0.99, 0.9, 20)  # decided against 0.9, not the operator's 0.97
    assert prefer_validated_code(strict, trials(The=measured_at_query_target)) == strict
    chosen = prefer_validated_code(strict, trials(The=CodeTrial(CODE, 0.99, 0.97, 200)))
    assert isinstance(chosen, SemCode) and chosen.min_agreement == 0.97 and chosen.output_schema == strict.output_schema


def test_trials_are_keyed_by_operator_instruction_and_outputs_not_input() -> None:
    assert trial_key(extract()) == trial_key(extract(input=Filter(input=scan(), predicate="n > 0")))
    assert trial_key(extract()) != trial_key(extract(fields=(ExtractField(name="day", type="text"),)))


def test_the_choice_is_not_in_the_result_preserving_rules() -> None:
    assert prefer_validated_code not in RULES and rules.prefer_validated_code is prefer_validated_code
