"""An ask killed (SIGKILL) while its independent dataset sub-agents run resumes paying once for the committed ones.

``ask_child.py`` (a dry-run ask on the slow stand-in planner, no Ray) runs with three profiling sub-agents,
two at a time: the kill comes as soon as one sub-agent's unit has committed while the profiling unit that
started them has not. The resumed ask (another process) replays the committed sub-agents from the journal,
redoes the others, and reaches the plan an uninterrupted ask reaches, calling the model for exactly the
uninterrupted ask's calls less those of the sub-agent units committed before the kill.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from agent_fixtures import write_data
from ask_child import ask
from test_agents_ask_resume import _kill_at

from semray.planner.agents.ask_journal import (
    AskFinished,
    AskRecord,
    StepJournaled,
    UnitCommitted,
    read_ask_trace,
    render_ask_trace,
)

CHILD = Path(__file__).with_name("ask_child.py")
SUBAGENTS = {"SEMRAY_AGENT_DATASET_AGENTS": "3", "SEMRAY_AGENT_PARALLELISM": "2"}


def _calls(path: Path, pid: int | None = None) -> list[str]:
    lines = [line.split(" ", 1) for line in path.read_text(encoding="utf-8").splitlines()] if path.is_file() else []
    return [call for who, call in lines if pid is None or int(who) == pid]


def mid_subagents(records: tuple[AskRecord, ...]) -> bool:
    """A sub-agent's unit committed; the profiling unit that started the sub-agents has not."""
    lanes = any(isinstance(record, UnitCommitted) and record.subagent for record in records)
    profiled = any(isinstance(record, UnitCommitted) and record.unit_name == "profile" for record in records)
    return lanes and not profiled


def test_an_ask_killed_mid_subagents_resumes_paying_once_for_the_committed_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SUBAGENTS.items():
        monkeypatch.setenv(name, value)
    data = tmp_path / "data"
    data.mkdir()
    write_data(data)
    clean_calls_file = tmp_path / "clean.txt"
    clean = ask(tmp_path / "clean", data, clean_calls_file, 0.0)
    clean_calls = _calls(clean_calls_file)
    assert sum(call.startswith("profiling/inspect") for call in clean_calls) >= 3

    state, calls = tmp_path / "state", tmp_path / "calls.txt"
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(state), str(data), str(calls)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **SUBAGENTS, "ASK_CHILD_DELAY_S": "0.3", "SEMRAY_LOG_LEVEL": "warning"},
    )
    folder = _kill_at(child, state, mid_subagents)
    killed = read_ask_trace(folder)
    lanes = {(r.subagent, r.unit) for r in killed if isinstance(r, UnitCommitted) and r.subagent}
    assert 1 <= len(lanes) < 3  # killed mid-way: some sub-agents committed, not all
    paid_committed = [
        f"{r.agent}/{r.step}"
        for r in killed
        if isinstance(r, StepJournaled) and r.model and (r.subagent, r.unit) in lanes
    ]
    assert paid_committed and all(step == "profiling/inspect" for step in paid_committed)

    result = ask(state, data, calls, 0.0)
    assert result.ask_id == folder.name and result.plan_json == clean.plan_json
    committed_calls = [
        call
        for call in _calls(calls, child.pid)
        if call.startswith("profiling/inspect") and _digest_of(call, killed, lanes)
    ]
    assert len(committed_calls) == len(paid_committed)
    # Committed sub-agents paid once: the resume called the model for all the rest, and only for that.
    assert Counter(_calls(calls, os.getpid())) == Counter(clean_calls) - Counter(committed_calls)
    records = read_ask_trace(folder)
    replayed = [r for r in records if isinstance(r, StepJournaled) and r.attempt == 2 and (r.subagent, r.unit) in lanes]
    assert replayed and all(r.replayed and r.dollars == 0.0 for r in replayed if r.model)
    assert isinstance(records[-1], AskFinished) and records[-1].status == "succeeded"
    shown = render_ask_trace(folder)
    lane = sorted(lanes)[0][0]
    assert f"[{lane}] u0 inspect replayed from the journal of process 1: nothing paid again" in shown


def _digest_of(call: str, killed: tuple[AskRecord, ...], lanes: set[tuple[str, int]]) -> bool:
    """Whether a logged call (``agent/step digest``) is one a committed sub-agent unit journaled."""
    import hashlib

    digest = call.split(" ", 1)[1]
    return any(
        isinstance(r, StepJournaled)
        and (r.subagent, r.unit) in lanes
        and hashlib.sha256(r.inputs["prompt"].encode()).hexdigest()[:16] == digest
        for r in killed
    )
