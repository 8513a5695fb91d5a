"""``semray ask`` on local Ray whose answer fails reflection at the limit: the CLI, the trace and MCP say so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from agent_fixtures import QUESTION, gold_document, write_data

from semray.cli import main
from semray.mcp_server import ask_tool
from semray.planner.agents import SourceCatalog
from semray.planner.agents.reflection import rendered_reflection
from semray.settings import Settings

REASON = "avg_rating holds product ids (1 to 3), not ratings"


def _recording(tmp_path: Path, tables: dict[str, Path]) -> Path:
    wrong = gold_document(SourceCatalog.from_paths(tables), "avg(product_id)")
    answers = {
        "profiling/choose": [{"json": {"datasets": ["reviews", "products"], "reason": "ratings"}}],
        "planning/outline": [{"json": {"steps": [{"operator": "aggregate", "purpose": "average"}]}}],
        "manipulation/fill": [{"json": wrong}],
        "semantic/judge": [{"json": {"verdict": "accept", "mismatch": "", "correction": ""}}] * 3,
        "reflection/check": [{"text": rendered_reflection("implausible", REASON, "logic", "average rating")}],
    }
    path = tmp_path / "recording.json"
    path.write_text(json.dumps({"version": 1, "model": "qwen-recorded", "answers": answers}), encoding="utf-8")
    return path


@pytest.mark.ray
def test_an_answer_failing_reflection_at_the_limit_is_shown_with_a_warning_and_exit_code_1(
    ray_settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEMRAY_AGENT_REFLECTION", "true")  # recorded answers reflect only when told
    tables = write_data(tmp_path)
    recording = _recording(tmp_path, tables)
    state = ["--state-dir", str(ray_settings.state_dir)]
    table_args = [arg for name, path in tables.items() for arg in ("-t", f"{name}={path}")]
    argv = [*state, "ask", QUESTION, "--replay", str(recording), "--max-iterations", "1", "--judges", "1"]
    code = main([*argv, "--format", "csv", *table_args])
    captured = capsys.readouterr()
    assert code == 1  # not a clean success; an error would be 2
    assert "name,avg_rating" in captured.out and "lamp" in captured.out  # the answer is still shown
    warned = r"WARNING: the answer failed reflection after the last draft \(1\): (.+?); it may not"
    found = re.search(warned, captured.err)
    assert found is not None and found.group(1) == REASON
    ask_id = re.search(r"ask (\S+): journaled", captured.err).group(1)  # type: ignore[union-attr]

    assert main([*state, "runs", "show", ask_id]) == 0
    shown = capsys.readouterr().out
    assert "status unverified" in shown and f"WARNING: the answer failed reflection: {REASON}" in shown
    assert "finished: unverified" in shown
    assert main([*state, "runs", "ls"]) == 0
    assert f"{ask_id}  unverified" in capsys.readouterr().out
    assert main([*state, "ask", "--resume", ask_id]) == 2
    assert "already ended with an answer that failed reflection" in capsys.readouterr().err

    settings = ray_settings.model_copy(update={"agent_reflection": True, "agent_max_retries": 0})
    answered = ask_tool(settings, QUESTION, replay=str(recording), tables={k: str(v) for k, v in tables.items()})
    assert answered["reflection"] == {"verdict": "implausible", "reason": REASON}
    assert answered["warning"].startswith("WARNING: the answer failed reflection")
