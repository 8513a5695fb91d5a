"""An ``ask`` killed with SIGKILL at three points resumes to the same plan, paying once for committed units.

Each case runs ``ask_child.py`` (a dry-run ask on a slow stand-in planner, no Ray), kills it the
moment its journal reaches the point, resumes it here (another process than the killed one), and
compares with the same ask run here uninterrupted: the plan, and the model calls (step and prompt
digest) the resume made, which must be exactly the uninterrupted ask's calls after those of the
units committed before the kill.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_fixtures import write_data
from ask_child import ask

from semray.planner.agents.ask_journal import (
    ASKS_FOLDER,
    AskFinished,
    AskRecord,
    StepJournaled,
    UnitCommitted,
    UnitVerdictJournaled,
    read_ask_trace,
    render_ask_trace,
)
from semray.planner.agents.source_view import ListMemory

CHILD = Path(__file__).with_name("ask_child.py")
PLAN_UNIT = 3
Point = Callable[[tuple[AskRecord, ...]], bool]


def _committed(records: tuple[AskRecord, ...]) -> set[int]:
    return {record.unit for record in records if isinstance(record, UnitCommitted)}


def after_profile_commits(records: tuple[AskRecord, ...]) -> bool:
    return 1 in _committed(records)


def mid_second_plan_attempt(records: tuple[AskRecord, ...]) -> bool:
    """The repaired draft is journaled and its judges are being asked (slowly): no verdict yet."""
    return any(
        isinstance(record, StepJournaled) and (record.unit, record.unit_attempt, record.step) == (PLAN_UNIT, 2, "fill")
        for record in records
    )


def after_plan_validated(records: tuple[AskRecord, ...]) -> bool:
    """The plan unit committed; the consolidation of memory (slow) has not."""
    return PLAN_UNIT in _committed(records)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    """The data folder, and the plan and model calls of the ask run once without a kill."""
    root = tmp_path_factory.mktemp("ask")
    data = root / "data"
    data.mkdir()
    write_data(data)
    calls = root / "calls.txt"
    result = ask(root / "state", data, calls, 0.0)
    return data, result.plan_json, _calls(calls)


def _calls(path: Path, pid: int | None = None) -> list[str]:
    """``agent/step digest`` of each model call in the log, of one process when ``pid`` is given."""
    if not path.is_file():
        return []
    lines = [line.split(" ", 1) for line in path.read_text(encoding="utf-8").splitlines()]
    return [call for who, call in lines if pid is None or int(who) == pid]


def _child(state: Path, data: Path, calls: Path, *resume: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), str(state), str(data), str(calls), *resume],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "ASK_CHILD_DELAY_S": "0.2", "SEMRAY_LOG_LEVEL": "warning"},
    )


def _kill_at(child: subprocess.Popen[str], state: Path, point: Point, timeout_s: float = 60.0) -> Path:
    """SIGKILL the child as soon as its ask's journal satisfies ``point``; the trace folder."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert child.poll() is None, "the ask finished before the kill point: slow the child down"
        folders = list((state / ASKS_FOLDER).glob("*/journal.jsonl")) if (state / ASKS_FOLDER).is_dir() else []
        if folders and point(read_ask_trace(folders[0].parent)):
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            return folders[0].parent
        time.sleep(0.01)
    child.kill()
    raise AssertionError("the ask never reached the kill point")


@pytest.mark.parametrize(
    ("point", "by_id"),
    [(after_profile_commits, True), (mid_second_plan_attempt, False), (after_plan_validated, True)],
    ids=["after-unit-1-commits", "mid-attempt", "after-plan-validated"],
)
def test_an_ask_killed_at_any_point_resumes_to_the_same_plan_paying_once_for_committed_units(
    tmp_path: Path, uninterrupted: tuple[Path, str, list[str]], point: Point, by_id: bool
) -> None:
    data, clean_plan, clean_calls = uninterrupted
    state, calls = tmp_path / "state", tmp_path / "calls.txt"
    first = _child(state, data, calls)
    folder = _kill_at(first, state, point)
    killed = read_ask_trace(folder)
    committed = _committed(killed)
    assert not any(isinstance(record, AskFinished) for record in killed)
    assert ListMemory(state / "memory.json").records == ()  # no unit that writes memory committed
    if point is mid_second_plan_attempt:
        assert not any(
            isinstance(r, UnitVerdictJournaled) and (r.unit, r.unit_attempt) == (PLAN_UNIT, 2) for r in killed
        )
    if point is after_plan_validated:
        assert 4 not in committed  # killed in the consolidation, before its commit
    paid_in_committed = sum(
        1 for record in killed if isinstance(record, StepJournaled) and record.model and record.unit in committed
    )
    assert _calls(calls, first.pid)[:paid_in_committed] == clean_calls[:paid_in_committed]

    result = ask(state, data, calls, 0.0, folder.name if by_id else None)
    assert result.ask_id == folder.name  # the same ask went on, whether named or found by its key
    assert result.plan_json == clean_plan
    # Committed units paid once: the resume called the model for exactly what was left, with the
    # prompts an uninterrupted ask sends (nothing of the killed attempt reached them).
    assert _calls(calls, os.getpid()) == clean_calls[paid_in_committed:]
    assert sum(step.dollars for step in result.steps if step.replayed) == 0.0

    records = read_ask_trace(folder)
    resumed_steps = [r for r in records if isinstance(r, StepJournaled) and r.attempt == 2 and r.model]
    replayed = [step for step in resumed_steps if step.unit in committed]
    assert len(replayed) == paid_in_committed and all(step.replayed and step.dollars == 0.0 for step in replayed)
    assert isinstance(records[-1], AskFinished) and records[-1].status == "succeeded"
    assert (folder / "workspace" / "plan.json").read_text(encoding="utf-8") == clean_plan
    assert len(list((state / ASKS_FOLDER).iterdir())) == 1
    shown = render_ask_trace(folder)
    assert "status succeeded" in shown and "over 2 process(es)" in shown and "(process 2)" in shown
    assert "u1 profile replayed from the journal of process 1: nothing paid again" in shown
    # Long-term memory holds the lesson of the failed first draft once: written by the one consolidation.
    lessons = ListMemory(state / "memory.json").records
    assert len(lessons) == 1 and lessons[0].source_run == folder.name


class Crash(Exception):
    """Stands for a SIGKILL: nothing below the test catches it."""


def test_a_kill_between_writing_memory_and_journaling_the_commit_writes_the_lesson_once(
    tmp_path: Path, uninterrupted: tuple[Path, str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consolidation applied its write to long-term memory, then died before its commit record.

    The resumed ask consolidates again: it must neither write the lesson twice nor count its own
    first write as an earlier occurrence (which would promote a one-off error to knowledge).
    """
    from semray.planner.agents.ask_journal import AskTrace

    data, clean_plan, _ = uninterrupted
    state, calls = tmp_path / "state", tmp_path / "calls.txt"
    append = AskTrace.append

    def dying(self: AskTrace, record: object) -> None:
        if isinstance(record, UnitCommitted) and record.unit_name == "consolidate" and not self.resumed:
            raise Crash("killed after the memory write, before the commit record")
        append(self, record)  # type: ignore[arg-type]

    monkeypatch.setattr(AskTrace, "append", dying)
    with pytest.raises(Crash):
        ask(state, data, calls, 0.0)
    written = ListMemory(state / "memory.json").records
    assert len(written) == 1  # applied, not journaled as committed

    result = ask(state, data, calls, 0.0)
    assert result.plan_json == clean_plan and result.ask_id == written[0].source_run
    lessons = ListMemory(state / "memory.json").records
    assert [(r.category, r.memory_id) for r in lessons] == [("failure", written[0].memory_id)]
