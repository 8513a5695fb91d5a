"""An ask killed (SIGKILL) while its validated plan runs resumes the run without drafting again.

The plan unit commits the validated plan before the run unit executes it, so the resumed
process replays every planning unit from the journal (no model call at all: its recording is
empty) and runs the same plan again (the engine's own journal resumes the interrupted run of the
same plan, ``transactions/``).
"""

from __future__ import annotations

from pathlib import Path

from agent_fixtures import PROFILE
from run_child import LoggedModel, ask, kill_once_running

from semray.operators import Node
from semray.planner.agents.ask_journal import (
    ASKS_FOLDER,
    AskFinished,
    StepJournaled,
    UnitCommitted,
    read_ask_trace,
)
from semray.planner.agents.recorded import RecordedModel

CHILD = Path(__file__).with_name("run_child.py")


def test_an_ask_killed_while_its_plan_runs_resumes_the_run_paying_nothing_for_planning(tmp_path: Path) -> None:
    state, data, calls, mark = tmp_path / "state", tmp_path / "data", tmp_path / "calls.txt", tmp_path / "running"
    data.mkdir()
    kill_once_running(CHILD, state, data, calls, mark)
    (folder,) = (state / ASKS_FOLDER).iterdir()
    killed = read_ask_trace(folder)
    committed = [record.unit_name for record in killed if isinstance(record, UnitCommitted)]
    assert committed == ["recall", "profile", "outline", "plan"]  # the plan is committed, its run is not
    paid = [line.split(" ", 1)[1] for line in calls.read_text(encoding="utf-8").splitlines()]
    assert paid.count("manipulation/fill") == 2 and paid.count("semantic/judge") == 3

    runs: list[Node] = []

    def executor(plan: Node) -> str:
        runs.append(plan)
        return "rows"

    nothing = LoggedModel(RecordedModel({}, PROFILE), calls)  # any model call would raise
    result = ask(state, data, nothing, executor)
    assert result.executed == "rows" and runs == [result.plan] and result.iterations == 2
    assert len(calls.read_text(encoding="utf-8").splitlines()) == len(paid)  # nothing paid again
    records = read_ask_trace(folder)
    resumed = [r for r in records if isinstance(r, StepJournaled) and r.attempt == 2 and r.model]
    assert resumed and all(step.replayed and step.dollars == 0.0 for step in resumed)
    again = [r.unit_name for r in records if isinstance(r, UnitCommitted) and r.attempt == 2]
    assert again == ["recall", "profile", "outline", "plan", "run", "consolidate"]
    assert isinstance(records[-1], AskFinished) and records[-1].status == "succeeded"
    assert (folder / "workspace" / "plan.json").is_file()
