"""Sub-agents of the three kinds on recorded and stand-in answers: competing candidates and independent dataset
sub-agents run at once (shown structurally: each call waits until all its siblings are in flight), a failed
sub-agent leaves nothing in later prompts, the workspace or memory, and collaborators' branches merge with
the conflict rule."""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import PROFILE, QUESTION, catalog_of, choose, gold_document, outline, plan, recorded

from semray.planner.agents import ListMemory, StepRunner, plan_question
from semray.planner.agents.ask_journal import (
    BranchesMerged,
    StepJournaled,
    UnitCommitted,
    UnitVerdictJournaled,
    open_ask_trace,
    read_ask_trace,
    render_ask_trace,
)
from semray.planner.agents.collaboration import merge_documents, shares_of
from semray.planner.agents.issues import PlanIssue
from semray.planner.agents.loop import LoopConfig
from semray.planner.agents.models import AgentCall
from semray.planner.agents.recorded import RecordedAnswer, RecordedModel
from semray.planner.agents.subagents import run_at_once
from semray.planner.agents.units import StagedMemory, UnitAttempt, UnitFailedError, UnitPolicy, UnitRunner, Verdict
from semray.serving.contract import ModelResponse

OPS = ("scan", "join", "aggregate")
WAIT_S = 20.0
"""How long a call waits for its siblings: reached only when they do not run at once (the test then fails)."""


class Gathering:
    """A model whose calls of one step wait until ``count`` of them are in flight together.

    A ``threading.Barrier``: if the sub-agents ran one after another the first call would wait alone
    and the barrier break (``BrokenBarrierError``), failing the test; no timing is measured.
    """

    def __init__(self, inner: Any, step: str, count: int) -> None:
        self.inner, self.step = inner, step
        self.barrier = threading.Barrier(count, timeout=WAIT_S)
        self.profile, self.name, self.structured_output = inner.profile, inner.name, inner.structured_output
        self.threads: set[str] = set()

    def answer(self, call: AgentCall) -> ModelResponse:
        if f"{call.agent}/{call.step}" == self.step:
            self.threads.add(threading.current_thread().name)
            self.barrier.wait()
        return self.inner.answer(call)


def test_run_at_once_keeps_the_order_of_the_tasks_and_raises_the_first_error_after_all_ended() -> None:
    ended: list[int] = []
    barrier = threading.Barrier(3, timeout=WAIT_S)

    def task(number: int) -> int:
        barrier.wait()  # all three in flight together
        ended.append(number)
        if number == 1:
            raise UnitFailedError("task 1 failed", ())
        return number

    with pytest.raises(UnitFailedError, match="task 1"):
        run_at_once([lambda n=n: task(n) for n in range(3)], parallelism=3)
    assert sorted(ended) == [0, 1, 2]  # the error waited for the others
    assert run_at_once([lambda: "a", lambda: "b"], parallelism=1) == ["a", "b"]


def test_competing_candidates_are_drafted_at_once_each_journaled_as_its_own_attempt(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    gold, wrong = gold_document(catalog), gold_document(catalog, "avg(ratng)")
    inner = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(wrong), plan(gold), plan(wrong)],
    )
    model = Gathering(inner, "manipulation/fill", 3)
    trace = open_ask_trace(tmp_path / "state", QUESTION, "m")
    config = LoopConfig(semantic=False, candidates=3, parallelism=3)
    result = plan_question(QUESTION, catalog=catalog, model=model, config=config, trace=trace)
    trace.close()
    assert len(model.threads) == 3  # three threads were in the model at once
    assert json.loads(result.plan_json)["plan"]["aggs"][0]["expr"] == "avg(rating)" and result.iterations == 1
    fills = [step for step in result.trace.steps if step.kind == "fill"]
    assert sorted(step.branch for step in fills) == ["candidate-0", "candidate-1", "candidate-2"]
    assert len({dict(step.inputs)["prompt"] for step in fills}) == 1  # none saw another's draft

    records = read_ask_trace(trace.folder)
    own = [r for r in records if isinstance(r, UnitVerdictJournaled) and r.unit_name == "plan" and r.branch]
    assert sorted(r.branch for r in own) == ["candidate-0", "candidate-1", "candidate-2"]
    assert sum(r.ok for r in own) == 1  # each candidate has its own verdict: one valid, two not
    (picked,) = [r for r in records if isinstance(r, BranchesMerged)]
    assert picked.how == "picked" and len(picked.branches) == 3 and len(picked.chosen) == 1
    steps = [r for r in records if isinstance(r, StepJournaled) and r.step == "fill"]
    assert {r.branch for r in steps} == {"candidate-0", "candidate-1", "candidate-2"}
    # Each candidate's draft sat in its own staging folder; only the winner's plan reached the workspace.
    assert sorted(path.name for path in trace.workspace.iterdir()) == ["plan.json"]
    assert not any((trace.folder / "staging").iterdir())
    shown = render_ask_trace(trace.folder)
    assert "(candidate-1)  manipulation/fill" in shown and "3 branches, picked candidate-" in shown


def test_independent_dataset_subagents_run_at_once_each_seeing_its_own_dataset(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    inspected = {
        "reviews": {"relevant": True, "columns": ["product_id", "rating"], "notes": "ratings 1 to 5 per review"},
        "products": {"relevant": True, "columns": ["id", "name"], "notes": "joins reviews on id = product_id"},
        "weather": {"relevant": False, "columns": [], "notes": ""},
    }
    inner = ByDataset(
        inspected,
        recorded(planning_outline=[outline(*OPS)], manipulation_fill=[plan(gold_document(catalog))]),
    )
    model = Gathering(inner, "profiling/inspect", 3)
    trace = open_ask_trace(tmp_path / "state", QUESTION, "m")
    config = LoopConfig(semantic=False, dataset_agents=3, parallelism=3)
    result = plan_question(QUESTION, catalog=catalog, model=model, config=config, trace=trace)
    trace.close()
    assert len(model.threads) == 3 and result.datasets == ("reviews", "products")
    inspections = [dict(step.inputs) for step in result.trace.steps if step.kind == "inspect"]
    prompts = {inputs["dataset"]: inputs["prompt"] for inputs in inspections}
    assert sorted(prompts) == sorted(inspected)
    for name, prompt in prompts.items():  # an isolated context: its own dataset, none of the others
        assert f"dataset {name}:" in prompt
        assert not any(f"dataset {other}:" in prompt for other in inspected if other != name)
    fill = dict(result.trace.of("manipulation")[0].inputs)["prompt"]
    assert "notes: reviews: needs product_id, rating; ratings 1 to 5 per review" in fill
    assert "weather" not in fill and "choose" not in {step.kind for step in result.trace.steps}
    records = read_ask_trace(trace.folder)
    lanes = sorted(r.subagent for r in records if isinstance(r, UnitCommitted) and r.subagent)
    assert lanes == ["u1.1-profile-products", "u1.1-profile-reviews", "u1.1-profile-weather"]
    assert json.loads((trace.workspace / "datasets" / "reviews.json").read_text())["columns"] == [
        "product_id",
        "rating",
    ]
    assert "[u1.1-profile-reviews] u0 inspect a1  profiling/inspect" in render_ask_trace(trace.folder)


class ByDataset:
    """Answers ``profiling/inspect`` by the dataset its prompt shows (the order threads call in is free);
    every other step from ``inner``. ``bad`` datasets get a reply naming a column they do not have."""

    def __init__(self, inspected: dict[str, dict[str, Any]], inner: RecordedModel, bad: tuple[str, ...] = ()) -> None:
        self.inspected, self.inner, self.bad = inspected, inner, bad
        self.profile, self.name, self.structured_output = inner.profile, inner.name, inner.structured_output
        self.lock = threading.Lock()

    def answer(self, call: AgentCall) -> ModelResponse:
        if f"{call.agent}/{call.step}" != "profiling/inspect":
            return self.inner.answer(call)
        name = next(name for name in self.inspected if f"only one you see):\ndataset {name}:" in call.request.prompt)
        reply = dict(self.inspected[name])
        if name in self.bad:
            reply = {"relevant": True, "columns": ["zzz_made_up_column"], "notes": "ZZZ-FAILED-SUBAGENT-NOTE"}
        answer = RecordedModel({"profiling/inspect": [RecordedAnswer(json.dumps(reply), 300, 30)]}, PROFILE)
        return answer.answer(call)


def test_a_failed_subagent_reaches_no_later_prompt_no_workspace_and_no_memory(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    inspected = {
        "reviews": {"relevant": True, "columns": ["product_id", "rating"], "notes": "ratings"},
        "products": {"relevant": True, "columns": ["id", "name"], "notes": "names"},
        "weather": {"relevant": False, "columns": [], "notes": ""},
    }
    wrong = gold_document(catalog, "avg(ratng)")  # one failed draft: memory then has a lesson to consolidate
    inner = recorded(
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(wrong), plan(gold_document(catalog))],
    )
    model = ByDataset(inspected, inner, bad=("weather",))
    memory = ListMemory()
    trace = open_ask_trace(tmp_path / "state", QUESTION, "m")
    config = LoopConfig(semantic=False, dataset_agents=3, parallelism=3)
    result = plan_question(QUESTION, catalog=catalog, model=model, config=config, memory=memory, trace=trace)
    trace.close()
    assert result.datasets == ("reviews", "products") and result.iterations == 2
    # The weather sub-agent failed validation on each of its 3 attempts, its retries seeing its own problem; the
    # failed first draft's data problem sent the profiling back, and its weather sub-agent failed again.
    inspections = [step for step in result.trace.steps if step.kind == "inspect" and "weather" in step.branch]
    assert len(inspections) == 6 and "zzz_made_up_column" in dict(inspections[1].inputs)["prompt"]
    later = [
        dict(step.inputs)["prompt"]
        for step in result.trace.steps
        if step.model and "weather" not in step.branch  # every prompt but the failed sub-agent's own
    ]
    assert len(later) == 7  # 4 other sub-agents, the outline, 2 drafts
    assert not any("zzz_made_up_column" in prompt or "ZZZ-FAILED" in prompt for prompt in later)
    assert not any("zzz" in record.memory.lower() for record in memory.records)
    assert any(record.category == "failure" for record in memory.records)  # the plan's own lesson was written
    assert not (trace.workspace / "datasets" / "weather.json").exists()
    assert (trace.workspace / "datasets" / "reviews.json").is_file()
    records = read_ask_trace(trace.folder)
    weather = [r for r in records if isinstance(r, UnitVerdictJournaled) and r.subagent.endswith("weather")]
    assert [r.ok for r in weather] == [False] * 6
    assert not any(isinstance(r, UnitCommitted) and r.subagent.endswith("weather") for r in records)


def test_a_subagents_memory_writes_and_files_reach_the_store_only_when_its_parent_commits(tmp_path: Path) -> None:
    store = ListMemory()
    trace = open_ask_trace(tmp_path, "q", "m")
    units = UnitRunner(StepRunner(None), UnitPolicy(max_retries=1), trace, StagedMemory(store))

    def parent(current: UnitAttempt) -> str:
        lane = current.subagent("child")

        def child(attempt: UnitAttempt) -> str:
            assert lane.memory is not None
            lane.memory.remember("q", f"lesson of parent attempt {current.number}", "knowledge")
            attempt.write_file("child.txt", f"attempt {current.number}".encode())
            return "done"

        lane.run("child", child, lambda _value, _attempt: Verdict())  # the child commits: into the parent only
        assert store.recall("q", 10) == []  # not in long-term memory yet
        assert not (trace.workspace / "child.txt").exists()
        return "bad" if current.number == 1 else "good"

    outcome = units.run("parent", parent, lambda value, _: Verdict(() if value == "good" else (BAD,)))
    trace.close()
    assert outcome.attempts == 2
    # The first parent attempt failed: its child's commit went with it. The second's reached memory and files.
    assert [record.memory for record in store.recall("q", 10)] == ["lesson of parent attempt 2"]
    assert (trace.workspace / "child.txt").read_bytes() == b"attempt 2"


BAD = PlanIssue("plan", "the draft reads no dataset", "table")


class Collaborating:
    """A planner that breaks the first draft in two places and repairs by the problems its prompt shows.

    Collaborator 0 (shown the type problem) fixes it and renames the aggregate ``mean_rating``; collaborator 1
    (shown the path problem) fixes that and renames it ``average_rating``: the rename is a conflict.
    """

    def __init__(self, catalog: Any, gather: int = 2) -> None:
        gold = gold_document(catalog)
        self.broken = copy.deepcopy(gold)
        self.broken["plan"]["input"]["left"]["source_schema"]["columns"][2]["type"] = "VARCHAR"
        self.broken["plan"]["input"]["right"]["source"]["path"] = "/nowhere/products.csv"
        self.fix_type = copy.deepcopy(self.broken)
        self.fix_type["plan"]["input"]["left"] = gold["plan"]["input"]["left"]
        self.fix_type["plan"]["aggs"] = [{"name": "mean_rating", "expr": "avg(rating)"}]
        self.fix_path = copy.deepcopy(self.broken)
        self.fix_path["plan"]["input"]["right"] = gold["plan"]["input"]["right"]
        self.fix_path["plan"]["aggs"] = [{"name": "average_rating", "expr": "avg(rating)"}]
        self.inner = recorded(profiling_choose=[choose("reviews", "products")] * 2, planning_outline=[outline(*OPS)])
        self.profile, self.name, self.structured_output = PROFILE, "collaborating", False
        self.barrier = threading.Barrier(gather, timeout=WAIT_S)
        self.prompts: list[str] = []

    def answer(self, call: AgentCall) -> ModelResponse:
        if f"{call.agent}/{call.step}" != "manipulation/fill":
            return self.inner.answer(call)
        prompt = call.request.prompt
        problems = prompt.split("Problems found in it (fix every one):", 1)[1]
        if problems.strip().startswith("none"):
            document = self.broken
        else:
            self.prompts.append(prompt)
            self.barrier.wait()  # both collaborators in flight at once
            document = self.fix_type if "is BIGINT, not 'VARCHAR'" in problems else self.fix_path
        answer = RecordedModel({"manipulation/fill": [plan(document)]}, PROFILE)
        return answer.answer(call)


def test_collaborators_repair_on_branches_and_a_conflict_keeps_the_earlier_problems_change(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    model = Collaborating(catalog)
    trace = open_ask_trace(tmp_path / "state", QUESTION, "m")
    config = LoopConfig(semantic=False, collaborators=2, parallelism=2)
    result = plan_question(QUESTION, catalog=catalog, model=model, config=config, trace=trace)
    trace.close()
    assert result.iterations == 2
    document = json.loads(result.plan_json)["plan"]
    assert document["aggs"][0]["name"] == "mean_rating"  # the conflict: collaborator 0 (the earlier problem) won
    assert document["input"]["left"]["source_schema"]["columns"][2]["type"] == "BIGINT"  # both repairs merged
    assert document["input"]["right"]["source"]["path"].endswith("products.csv")
    assert "nowhere" not in result.plan_json
    # Each collaborator saw its own problem only.
    (shown_type,) = [prompt for prompt in model.prompts if "is BIGINT" in prompt]
    (shown_path,) = [prompt for prompt in model.prompts if "not a chosen dataset" in prompt]
    assert "not a chosen dataset" not in shown_type and "is BIGINT" not in shown_path
    records = read_ask_trace(trace.folder)
    (merge,) = [r for r in records if isinstance(r, BranchesMerged)]
    assert merge.how == "merged" and merge.chosen == ("collaborator-0", "collaborator-1")
    (conflict,) = merge.conflicts
    assert conflict.startswith("plan.aggs: kept collaborator-0's") and "average_rating" in conflict
    branched = {r.branch for r in records if isinstance(r, StepJournaled) and r.step == "fill" and r.branch}
    assert branched == {"collaborator-0", "collaborator-1"}
    assert "conflict: plan.aggs: kept collaborator-0's" in render_ask_trace(trace.folder)


def test_the_merge_takes_changes_at_disjoint_places_and_treats_a_replaced_node_as_one_value() -> None:
    base = {"op": "filter", "predicate": "a > 1", "input": {"op": "scan", "source": "x"}}
    one = {**base, "predicate": "a > 2"}
    two = {**base, "input": {"op": "scan", "source": "y"}}
    assert merge_documents(base, [("b0", one), ("b1", two)]) == (
        {"op": "filter", "predicate": "a > 2", "input": {"op": "scan", "source": "y"}},
        (),
    )
    same = merge_documents(base, [("b0", one), ("b1", one)])
    assert same == (one, ())  # the same change twice is no conflict
    # b0 replaces the scan by a filter over it; b1 edits the old scan: the replaced node is one value, b0's.
    replaced = {**base, "input": {"op": "filter", "predicate": "b", "input": base["input"]}}
    merged, conflicts = merge_documents(base, [("b0", replaced), ("b1", two)])
    assert merged == replaced and [c.path for c in conflicts] == ["input"]
    removed = {key: value for key, value in base.items() if key != "predicate"}
    merged, conflicts = merge_documents(base, [("b0", removed), ("b1", one)])
    assert "predicate" not in merged and conflicts[0].line().startswith("predicate: kept b0's (removed)")
    issues = [PlanIssue("plan.a", "x", "column"), PlanIssue("plan.b", "y", "type"), PlanIssue("plan.a", "z", "column")]
    assert shares_of(issues, 1) == () and shares_of(issues[:1], 3) == ()
    assert shares_of(issues, 3) == ((issues[0], issues[2]), (issues[1],))
