"""The planning loop on recorded model answers: first-time right, repairs, routing, feedback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_fixtures import QUESTION, accepts, catalog_of, choose, gold_document, judge, outline, plan, recorded

from semray.errors import ExecutionError
from semray.operators import Aggregate, plan_from_json
from semray.planner.agents import (
    BudgetExceededError,
    ListMemory,
    PlanningFailedError,
    RecordedAnswer,
    StepRunner,
    plan_question,
)

OPS = ("scan", "join", "aggregate")


def kinds(result_steps: object) -> list[str]:
    return [f"{step.agent}/{step.kind}" for step in result_steps]  # type: ignore[attr-defined]


def test_a_right_first_plan_is_accepted_in_one_iteration_with_every_step_priced(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog))],
        semantic_judge=accepts(),
    )
    result = plan_question(QUESTION, catalog=catalog, model=model, memory=ListMemory())
    assert result.iterations == 1
    assert result.datasets == ("reviews", "products")
    assert isinstance(result.plan, Aggregate)
    assert plan_from_json(result.plan_json) == result.plan  # runnable by `semray run`
    assert kinds(result.trace.steps) == [
        "memory/recall",
        "memory/skill",
        "profiling/search",
        "profiling/choose",
        "profiling/describe",
        "planning/outline",
        "manipulation/fill",
        "grammar/validate",
        "semantic/judge",
        "semantic/judge",
        "semantic/judge",
        "memory/expire",
    ]
    assert all(count == 0 for count in model.remaining().values())
    fill = result.trace.of("manipulation")[0]
    assert (fill.input_tokens, fill.output_tokens) == (1500, 300)
    assert fill.dollars == pytest.approx((1500 * 2.0 + 300 * 8.0) / 1e6)
    expected = (400 * 2 + 30 * 8 + 2000 * 2 + 80 * 8 + 1500 * 2 + 300 * 8 + 3 * (900 * 2 + 40 * 8)) / 1e6
    assert result.trace.dollars == pytest.approx(expected)


def test_the_manipulation_prompt_holds_only_the_chosen_datasets_and_named_operators(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog))],
        semantic_judge=accepts(),
    )
    result = plan_question(QUESTION, catalog=catalog, model=model)
    prompt = dict(result.trace.of("manipulation")[0].inputs)["prompt"]
    assert "dataset reviews" in prompt and "dataset products" in prompt
    assert "weather" not in prompt
    assert "aggregate:" in prompt and "join:" in prompt
    assert "sem_filter:" not in prompt and "sem_topk:" not in prompt
    planning_prompt = dict(result.trace.of("planning")[0].inputs)["prompt"]
    assert "sem_topk:" in planning_prompt  # the planning agent sees every operator


def test_invalid_json_is_repaired_without_another_draft(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    text = json.dumps(gold_document(catalog), indent=1)
    broken = "Here is the plan:\n```json\n" + text.replace('"avg(rating)"', '"avg(rating)",')[:-1] + "\n```"
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(broken)],
        semantic_judge=accepts(),
    )
    result = plan_question(QUESTION, catalog=catalog, model=model)
    assert result.iterations == 1
    validation = result.trace.of("grammar")[0]
    assert "repaired" in validation.output and "trailing commas" in validation.output


def test_a_wrong_column_is_caught_with_its_path_sent_to_profiling_and_fixed(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    model = recorded(
        profiling_choose=[choose("reviews", "products"), choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog, "avg(ratng)")), plan(gold_document(catalog))],
        semantic_judge=accepts(),
    )
    result = plan_question(QUESTION, catalog=catalog, model=model)
    assert result.iterations == 2
    (issue,) = result.issues
    assert (issue.code, issue.category, issue.path) == ("column", "data", "plan.aggregate.aggs.0.expr")
    assert "did you mean 'rating'" in issue.message
    assert len(result.trace.of("profiling")) == 6  # searched, chose and described again
    assert len(result.trace.of("planning")) == 1  # a data error does not send the planner back
    second = dict(result.trace.of("manipulation")[1].inputs)["prompt"]
    assert "plan.aggregate.aggs.0.expr" in second and "ratng" in second


def test_a_majority_rejection_goes_back_to_planning_with_the_correction(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS), outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog, "sum(rating)")), plan(gold_document(catalog))],
        semantic_judge=[
            judge("reject", "the question asks for the average, the plan sums", "use avg(rating)"),
            judge("accept"),
            judge("reject", "sums instead of averaging", "avg"),
            *accepts(),
        ],
    )
    result = plan_question(QUESTION, catalog=catalog, model=model)
    assert result.iterations == 2
    (issue,) = result.issues
    assert issue.category == "semantic" and issue.correction == "use avg(rating)"
    assert len(result.trace.of("planning")) == 2
    replanned = dict(result.trace.of("planning")[1].inputs)["prompt"]
    assert "use avg(rating)" in replanned
    assert result.plan.aggs[0].expr == "avg(rating)"  # type: ignore[attr-defined]


def test_one_rejection_of_three_does_not_reject(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog))],
        semantic_judge=[judge("accept"), judge("reject", "x", "y"), judge("accept")],
    )
    assert plan_question(QUESTION, catalog=catalog, model=model).iterations == 1


def test_a_grammar_error_goes_to_the_manipulation_agent_only(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    document = gold_document(catalog)
    document["plan"]["op"] = "agregate"
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(document), plan(gold_document(catalog))],
        semantic_judge=accepts(),
    )
    result = plan_question(QUESTION, catalog=catalog, model=model)
    (issue,) = result.issues
    assert (issue.category, issue.code, issue.path) == ("grammar", "operator", "plan.op")
    assert "did you mean 'aggregate'" in issue.message
    assert len(result.trace.of("profiling")) == 3 and len(result.trace.of("planning")) == 1
    assert len(result.trace.of("manipulation")) == 2


def test_an_execution_error_is_fed_back_and_classified_by_the_dictionary(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    model = recorded(
        profiling_choose=[choose("reviews", "products"), choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog)), plan(gold_document(catalog))],
        semantic_judge=accepts(6),
    )
    calls: list[int] = []

    def executor(node: object) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ExecutionError("Conversion Error: could not convert string 'n/a' to INT64")
        return "rows"

    result = plan_question(QUESTION, catalog=catalog, model=model, executor=executor)
    assert result.executed == "rows" and result.iterations == 2
    (issue,) = result.issues
    assert issue.code == "execution" and "could not convert" in issue.message
    assert len(result.trace.of("profiling")) == 6  # a data error: back to the data
    assert not [step for step in result.trace.steps if step.kind == "classify"]  # the dictionary decided
    second = dict(result.trace.of("manipulation")[1].inputs)["prompt"]
    assert "could not convert" in second


def test_an_unknown_execution_error_is_classified_by_the_model(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS), outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog)), plan(gold_document(catalog))],
        semantic_judge=accepts(6),
        memory_classify=[RecordedAnswer("semantic", 100, 1)],
    )
    outcomes = iter([ExecutionError("the answer table has 3 rows but the totals disagree"), None])

    def executor(node: object) -> str:
        error = next(outcomes)
        if error is not None:
            raise error
        return "rows"

    result = plan_question(QUESTION, catalog=catalog, model=model, executor=executor)
    assert [step.kind for step in result.trace.of("memory")].count("classify") == 1
    assert len(result.trace.of("planning")) == 2  # semantic: back to the planner


def test_the_loop_is_bounded(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    wrong = gold_document(catalog, "avg(ratng)")
    model = recorded(
        profiling_choose=[choose("reviews", "products")] * 3,
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(wrong)] * 2,
    )
    from semray.planner.agents import LoopConfig

    with pytest.raises(PlanningFailedError, match=r"no valid plan after 2 drafts.*ratng"):
        plan_question(QUESTION, catalog=catalog, model=model, config=LoopConfig(max_iterations=2))


def test_max_cost_stops_the_steps(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    model = recorded(profiling_choose=[choose("reviews", "products")], planning_outline=[outline(*OPS)])
    runner = StepRunner(model, max_cost=0.0005)
    with pytest.raises(BudgetExceededError, match="max-cost"):
        plan_question(QUESTION, catalog=catalog, model=model, runner=runner)
    assert runner.trace.dollars >= 0.0005
