"""Reflection after the run, on recorded responses: passes; fails then a corrected plan passes; fails at the limit.

The executor stands for the engine: it returns an Arrow table per plan (a column of nulls for the first, wrong
plan; the right averages for the gold one), so the model's reflection reads a real answer's description.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from agent_fixtures import PROFILE, QUESTION, accepts, catalog_of, choose, gold_document, outline, plan, recorded

from semray.operators import Node, plan_to_json
from semray.operators.serialize import plan_from_dict
from semray.planner.agents import ListMemory, plan_question
from semray.planner.agents.ask_journal import (
    AskFinished,
    UnitCommitted,
    UnitFailed,
    UnitVerdictJournaled,
    open_ask_trace,
    read_ask_trace,
    render_ask_trace,
)
from semray.planner.agents.loop import LoopConfig
from semray.planner.agents.recorded import RecordedAnswer
from semray.planner.agents.reflection import describe_answer, read_reflection, rendered_reflection
from semray.planner.agents.units import UnitPolicy

OPS = ("scan", "join", "aggregate")
NULLS = pa.table({"name": ["lamp", "kettle", "chair"], "avg_rating": pa.array([None, None, None], pa.float64())})
GOLD = pa.table({"name": ["lamp", "kettle", "chair"], "avg_rating": [4.5, 2.5, 2.0]})
NULL_ROW = '{"name": "lamp", "avg_rating": null}'
REASON = "avg_rating is null for every product: the average reads a column that has no values"


def reflection(verdict: str, reason: str = "", cause: str = "none", correction: str = "") -> RecordedAnswer:
    return RecordedAnswer(rendered_reflection(verdict, reason, cause, correction), 700, 40)


def implausible() -> RecordedAnswer:
    return reflection("implausible", REASON, "logic", "average the rating column")


def wrong_document(catalog: Any) -> dict[str, Any]:
    """A plan the validators pass whose answer is wrong: it averages the product id, not the rating."""
    return gold_document(catalog, "avg(product_id)")


class Engine:
    """Answers each plan with its table: the gold plan with ``GOLD``, any other with ``NULLS``."""

    def __init__(self, gold: Node) -> None:
        self.gold = gold
        self.ran: list[Node] = []

    def __call__(self, node: Node) -> pa.Table:
        self.ran.append(node)
        return GOLD if node == self.gold else NULLS


def planned(tmp_path: Path, drafts: int, fills: list[Any], reflections: list[RecordedAnswer], **extra: Any) -> Any:
    catalog = catalog_of(tmp_path)
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS) for _ in fills],
        manipulation_fill=[plan(document) for document in fills],
        semantic_judge=accepts(len(fills)),
        reflection_check=reflections,
    )
    engine = Engine(plan_from_dict(gold_document(catalog)))
    trace = open_ask_trace(tmp_path / "state", QUESTION, "recorded")
    config = LoopConfig(judges=1, reflection=True, max_iterations=drafts, units=UnitPolicy(max_retries=2))
    try:
        result = plan_question(
            QUESTION, catalog=catalog, model=model, config=config, executor=engine, trace=trace, **extra
        )
    finally:
        trace.close()
    assert all(count == 0 for count in model.remaining().values()), model.remaining()
    return result, engine, trace.folder, catalog


def prompts(result: Any, agent: str, kind: str) -> list[str]:
    return [dict(step.inputs)["prompt"] for step in result.trace.steps if (step.agent, step.kind) == (agent, kind)]


def test_the_answer_is_described_and_a_strict_reply_read() -> None:
    shown = describe_answer(NULLS)
    assert "3 row(s), 2 column(s)" in shown and "- avg_rating (double): 3 null (100%)" in shown and NULL_ROW in shown
    assert "no rows" in describe_answer(NULLS.slice(0, 0)) and "not a table" in describe_answer("rows")
    assert read_reflection(rendered_reflection("implausible", "x", "data")).issue().category == "data"  # type: ignore[union-attr]
    assert read_reflection(rendered_reflection("implausible", "x", "logic")).issue().category == "semantic"  # type: ignore[union-attr]
    assert read_reflection('{"verdict": "maybe"}').verdict == "unreadable"


def test_an_answer_that_passes_reflection_is_reported_with_its_signal(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    result, engine, folder, _ = planned(
        tmp_path, 1, [gold_document(catalog)], [reflection("plausible", "three products with averages")], memory=memory
    )
    assert result.reflection.verdict == "plausible" and result.executed is GOLD and len(engine.ran) == 1
    (shown,) = prompts(result, "reflection", "check")
    assert QUESTION in shown and "3 row(s), 2 column(s)" in shown and '"avg_rating": 4.5' in shown
    assert "- avg_rating (double): 0 null (0%)" in shown and "Aggregate by ['name']" in shown  # the plan, as a tree
    records = read_ask_trace(folder)
    (run,) = [r for r in records if isinstance(r, UnitVerdictJournaled) and r.unit_name == "run"]
    assert run.ok and run.signals == {"reflection": 1.0}
    assert isinstance(records[-1], AskFinished) and records[-1].status == "succeeded"
    skills = [record for record in memory.records if record.category == "skill"]
    assert skills and "reflection: plausible" in skills[0].memory  # kept with the skill's evidence


def test_a_failed_reflection_sends_its_reason_to_a_new_plan_unit_and_the_corrected_plan_passes(
    tmp_path: Path,
) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    result, engine, folder, _ = planned(
        tmp_path,
        3,
        [wrong_document(catalog), gold_document(catalog)],
        [implausible(), reflection("plausible", "averages between 1 and 5")],
        memory=memory,
    )
    assert result.iterations == 2 and result.executed is GOLD and result.reflection.verdict == "plausible"
    assert engine.ran == [plan_from_dict(wrong_document(catalog)), result.plan]
    first, second = prompts(result, "reflection", "check")
    assert NULL_ROW in first and "3 null (100%)" in first and NULL_ROW not in second
    # The reason went back to the planning agents as the run unit's verdict, with its correction.
    fills = prompts(result, "manipulation", "fill")
    assert "the answer failed reflection" not in fills[0]
    assert f"the answer failed reflection: {REASON}" in fills[1] and "average the rating column" in fills[1]
    outlines = prompts(result, "planning", "outline")
    assert len(outlines) == 2 and REASON in outlines[1]  # a logic cause re-plans the outline
    # Isolation: the failed attempt's answer reaches no later prompt, only its verdict.
    later = [dict(step.inputs)["prompt"] for step in result.trace.steps if step.model][-4:]
    assert not any(NULL_ROW in text for text in later)
    records = read_ask_trace(folder)
    assert [(r.unit_name, r.unit) for r in records if isinstance(r, UnitFailed)] == [("run", 4)]
    committed = [r.unit_name for r in records if isinstance(r, UnitCommitted)]
    assert committed == ["recall", "profile", "outline", "plan", "plan", "run", "consolidate"]
    shown = render_ask_trace(folder)
    assert "u4 run failed after 1 attempt(s)" in shown and "reflection=0.000" in shown
    assert "u6 run a1  verdict passed reflection=1.000" in shown and "status succeeded" in shown
    # Only the plan whose answer passed is a skill.
    skills = [record for record in memory.records if record.category == "skill"]
    assert len(skills) == 1 and "avg(rating)" in skills[0].memory and "avg(product_id)" not in skills[0].memory


def test_an_answer_failing_reflection_at_the_limit_is_kept_flagged_never_as_a_clean_success(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    wrong = wrong_document(catalog)
    result, engine, folder, _ = planned(tmp_path, 2, [wrong, wrong], [implausible(), implausible()], memory=memory)
    assert result.iterations == 2 and len(engine.ran) == 2 and result.executed is NULLS
    assert result.reflection.failed and result.reflection.reason == REASON
    assert result.plan_json == plan_to_json(plan_from_dict(wrong))
    records = read_ask_trace(folder)
    runs = [r for r in records if isinstance(r, UnitCommitted) and r.unit_name == "run"]
    assert len(runs) == 1 and runs[0].forced  # the last draft's answer, committed after the last retry
    finished = records[-1]
    assert isinstance(finished, AskFinished) and finished.status == "unverified"
    assert finished.message == f"the answer failed reflection: {REASON}"
    shown = render_ask_trace(folder)
    assert "status unverified" in shown and f"WARNING: the answer failed reflection: {REASON}" in shown
    assert "committed after 1 attempt(s) (forced after the last retry)" in shown
    assert not [record for record in memory.records if record.category == "skill"]  # no skill of it


def test_a_reused_skill_whose_answer_fails_reflection_is_demoted_and_the_question_planned_anew(
    tmp_path: Path,
) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    gold = gold_document(catalog)
    planned(tmp_path, 1, [gold], [reflection("plausible", "averages")], memory=memory)
    (skill,) = [record for record in memory.records if record.category == "skill"]

    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold)],
        semantic_judge=accepts(2),  # the skill's plan, then the new draft
        reflection_check=[implausible(), reflection("plausible", "averages")],
    )
    answers = iter([NULLS, GOLD])  # the data changed under the skill: its answer is now nulls
    config = LoopConfig(judges=1, reflection=True, max_iterations=1)
    result = plan_question(
        QUESTION, catalog=catalog, model=model, config=config, executor=lambda _: next(answers), memory=memory
    )
    assert all(count == 0 for count in model.remaining().values())
    assert result.skill is None and result.executed is GOLD and result.reflection.verdict == "plausible"
    demoted = next(step for step in result.trace.steps if step.kind == "skill_demote")
    assert skill.memory_id in demoted.output and f"the answer failed reflection: {REASON}" in demoted.output
    assert skill.memory_id not in {record.memory_id for record in memory.records}


def test_without_reflection_no_model_reads_the_answer(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(wrong_document(catalog))],
        semantic_judge=accepts(1),
    )
    engine = Engine(plan_from_dict(gold_document(catalog)))
    result = plan_question(QUESTION, catalog=catalog, model=model, config=LoopConfig(judges=1), executor=engine)
    assert result.reflection is None and result.executed is NULLS and not prompts(result, "reflection", "check")


def test_an_ask_killed_after_a_failed_reflection_resumes_without_paying_that_reflection_again(tmp_path: Path) -> None:
    """Killed (SIGKILL) while the second plan runs: the first run unit, failed by its reflection, is replayed from
    the journal (its reflection and the re-planning it caused not paid again), the second plan runs again, and only
    its reflection, never made before the kill, is paid."""
    from reflect_child import GOLD as CHILD_GOLD
    from reflect_child import ask, is_gold
    from run_child import LoggedModel, kill_once_running

    from semray.planner.agents import SourceCatalog
    from semray.planner.agents.ask_journal import ASKS_FOLDER, StepJournaled
    from semray.planner.agents.recorded import RecordedModel

    state, data, calls, mark = tmp_path / "state", tmp_path / "data", tmp_path / "calls.txt", tmp_path / "running"
    data.mkdir()
    kill_once_running(Path(__file__).with_name("reflect_child.py"), state, data, calls, mark)
    paid = [line.split(" ", 1)[1] for line in calls.read_text(encoding="utf-8").splitlines()]
    assert paid.count("reflection/check") == 1 and paid.count("manipulation/fill") == 2
    (folder,) = (state / ASKS_FOLDER).iterdir()
    assert [r.unit_name for r in read_ask_trace(folder) if isinstance(r, UnitFailed)] == ["run"]

    catalog = SourceCatalog.from_paths({name: data / f"{name}.csv" for name in ("reviews", "products", "weather")})
    ran: list[Node] = []

    def engine(node: Node) -> pa.Table:
        ran.append(node)
        return CHILD_GOLD if is_gold(node, catalog) else NULLS

    # Only the second answer's reflection is left to pay: any other model call would raise.
    left = RecordedModel({"reflection/check": [reflection("plausible", "averages between 1 and 5")]}, PROFILE)
    result = ask(state, data, LoggedModel(left, calls), engine)
    assert result.executed is CHILD_GOLD and result.reflection.verdict == "plausible" and result.iterations == 2
    again = [line.split(" ", 1)[1] for line in calls.read_text(encoding="utf-8").splitlines()][len(paid) :]
    assert again == ["reflection/check"]  # the failed reflection and the drafts were replayed, not paid
    # The replayed failed run unit ran its plan again (local work is redone), then the gold plan ran.
    assert [is_gold(node, catalog) for node in ran] == [False, True]
    records = read_ask_trace(folder)
    replayed = [r for r in records if isinstance(r, StepJournaled) and r.attempt == 2 and r.replayed]
    assert ("reflection", "check") in {(r.agent, r.step) for r in replayed}
    assert isinstance(records[-1], AskFinished) and records[-1].status == "succeeded"
