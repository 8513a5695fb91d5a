"""The engine run of an ask is linked in its journal while it goes, and a resumed ask goes straight to it.

The engine stands in here as two functions (start a run with a progress reporter, resume a run by id): the
reporter is told the run's id at its first poll, as the engine's watcher tells it (``RunWatcher``); the test
on Ray (``test_agents_ask_ray.py``) checks the same link with the real engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import catalog_of, gold_document

from semray.asking import AskExecutor, plan_digest
from semray.operators import Node
from semray.pipeline.runs.progress import RunProgress
from semray.planner.agents.ask_journal import RunLinked, open_ask_trace, read_ask_trace, render_ask_trace
from semray.planner.agents.grammar import check_plan_text
from semray.serving.config import ServingConfig
from semray.settings import Settings
from semray.transactions.errors import RunStateError


class Killed(Exception):
    """Stands for a SIGKILL while the run goes."""


def _plan(tmp_path: Path) -> Node:
    import json

    catalog = catalog_of(tmp_path)
    report = check_plan_text(json.dumps(gold_document(catalog)), catalog, ("reviews", "products"))
    assert report.plan is not None
    return report.plan


def test_the_run_is_linked_while_it_goes_and_a_resumed_ask_resumes_it_by_id(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    state = tmp_path / "state"
    settings = Settings(state_dir=state)
    started: list[Node] = []

    def start_and_die(node: Node, reporter: Any) -> Any:
        started.append(node)
        reporter.update(RunProgress(run_id="20261205-010203-abcdef"), None)  # the watcher's first poll
        journal = read_ask_trace(trace.folder)
        assert any(isinstance(record, RunLinked) for record in journal)  # linked before the run ends
        raise Killed

    trace = open_ask_trace(state, "q", "m")
    with pytest.raises(Killed):
        AskExecutor(trace, settings, ServingConfig(), start=start_and_die)(plan)
    trace.close()
    (link,) = [record for record in read_ask_trace(trace.folder) if isinstance(record, RunLinked)]
    assert link.run_id == "20261205-010203-abcdef" and link.plan == plan_digest(plan)
    assert "engine run 20261205-010203-abcdef: not found (semray runs show 20261205-010203-abcdef)" in (
        render_ask_trace(trace.folder)
    )

    resumed: list[str] = []

    def resume(run_id: str, reporter: Any) -> str:
        resumed.append(run_id)
        reporter.close(RunProgress(run_id=run_id, status="succeeded"))
        return "rows of the resumed run"

    again = open_ask_trace(state, "q", "m")
    assert again.resumed and again.linked_run(plan_digest(plan)) == link.run_id
    executor = AskExecutor(again, settings, ServingConfig(), start=start_and_die, resume=resume)
    assert executor(plan) == "rows of the resumed run"
    again.close()
    assert resumed == [link.run_id] and len(started) == 1  # straight to the linked run, not started again
    links = [record for record in read_ask_trace(again.folder) if isinstance(record, RunLinked)]
    assert [record.run_id for record in links] == [link.run_id, link.run_id]  # linked again by the new process


def test_a_linked_run_that_cannot_resume_is_run_afresh_and_another_plan_is_never_taken_for_it(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    state = tmp_path / "state"
    settings = Settings(state_dir=state)
    trace = open_ask_trace(state, "q", "m")
    trace.append(RunLinked(attempt=1, run_id="20261205-010203-abcdef", plan=plan_digest(plan)))
    trace.close()

    def succeeded(run_id: str, reporter: Any) -> Any:
        raise RunStateError(f"run {run_id} already succeeded; nothing to resume")

    fresh: list[Node] = []

    def start(node: Node, reporter: Any) -> str:
        fresh.append(node)
        return "rows of a new run"

    again = open_ask_trace(state, "q", "m")
    assert AskExecutor(again, settings, ServingConfig(), start=start, resume=succeeded)(plan) == "rows of a new run"
    assert again.linked_run("another plan's digest") is None
    again.close()
    assert fresh == [plan]
