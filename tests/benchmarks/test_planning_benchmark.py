"""The planning benchmark at a tiny size: the report's shape, and the loop beating single-shot planning.

No model and no Ray: the stand-in planner answers every agent step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import planning

ARMS = {arm.name: arm for arm in planning.CONFIGURATIONS}


@pytest.fixture(scope="module")
def questions(tmp_path_factory: pytest.TempPathFactory) -> planning.QuestionSet:
    return planning.question_set(tmp_path_factory.mktemp("planning"), shared=False, limit=3)


def accuracy(questions: planning.QuestionSet, arm: str, rates: planning.Rates, seeds: int = 3) -> float:
    runs = [planning.run_arm(questions, ARMS[arm], rates, seed) for seed in range(seeds)]
    return sum(run.accuracy for run in runs) / seeds


def test_quick_mode_reports_every_configuration(tmp_path: Path) -> None:
    arguments = ["--quick", "--questions", "3", "--no-shared", "--seeds", "2"]
    paths = ["--results-dir", str(tmp_path / "results"), "--out-dir", str(tmp_path / "out")]
    assert planning.main([*arguments, *paths]) == 0
    data = json.loads((tmp_path / "results" / "planning.json").read_text(encoding="utf-8"))
    rows = data["figures"]["rows"]
    assert [row["configuration"] for row in rows] == [arm.name for arm in planning.CONFIGURATIONS]
    assert data["parameters"]["questions"] == 3 and data["parameters"]["fault_rates"] == [0.5]
    for row in rows:
        assert len(row["accuracy_by_seed"]) == 2
        assert 0.0 <= row["accuracy"] <= row["validated"] + row["wrong_but_validated"] <= 1.0
        assert row["iterations"] >= 1.0 and row["tokens"] > 0
    single = next(row for row in rows if row["configuration"] == "single-shot")
    assert single["iterations"] == 1.0
    report = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert report.count("## Planning loop") == 1 and "| 0.50 | full loop |" in report


def test_every_gold_plan_passes_the_grammar_validator(tmp_path: Path) -> None:
    from semray.planner.agents import check_plan_document

    everything = planning.question_set(tmp_path, shared=False)
    assert len(everything.cases) >= 20
    for case in everything.cases:
        assert check_plan_document(case.document, everything.catalog, case.datasets).ok, case.question


@pytest.mark.parametrize("fault", [0.5, 1.0])
def test_the_loop_is_at_least_as_accurate_as_single_shot(questions: planning.QuestionSet, fault: float) -> None:
    rates = planning.Rates(fault=fault, repair=0.9, recall=0.0)  # gains from feedback alone, not memory
    full, single = accuracy(questions, "full loop", rates), accuracy(questions, "single-shot", rates)
    assert full >= single
    if fault == 1.0:
        # Every first draft is faulty: single-shot can only be right where a semantic fault slips
        # through nothing, so it scores 0; the loop repairs from the feedback.
        assert single == 0.0 and full > single


def test_the_comparison_can_fail_when_feedback_does_not_repair(questions: planning.QuestionSet) -> None:
    """A negative control: a model that never repairs gains nothing from the loop, so the
    property above is a property of feedback, not of how the arms are scored."""
    rates = planning.Rates(fault=1.0, repair=0.0, recall=0.0, dataset_error=0.0)
    assert accuracy(questions, "full loop", rates) == accuracy(questions, "single-shot", rates) == 0.0
