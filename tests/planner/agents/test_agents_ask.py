"""``semray.ask`` and ``semray ask``: refusal on simulated tiers, replay of recorded answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_fixtures import QUESTION, catalog_of, gold_document, write_data

import semray
from semray.cli import main
from semray.operators import plan_from_json
from semray.planner.agents import PlanningNeedsModelError
from semray.settings import Settings


def _recording(tmp_path: Path) -> Path:
    catalog = catalog_of(tmp_path)
    answers = {
        "profiling/choose": [{"json": {"datasets": ["reviews", "products"], "reason": "ratings"}}],
        "planning/outline": [{"json": {"steps": [{"operator": "aggregate", "purpose": "average"}]}}],
        "manipulation/fill": [{"json": gold_document(catalog), "input_tokens": 1000, "output_tokens": 200}],
        "semantic/judge": [{"json": {"verdict": "accept", "mismatch": "", "correction": ""}}] * 3,
    }
    path = tmp_path / "recording.json"
    path.write_text(json.dumps({"version": 1, "model": "qwen-recorded", "answers": answers}), encoding="utf-8")
    return path


def test_simulated_tiers_refuse_to_plan_and_say_how_to_configure_one(tmp_path: Path) -> None:
    tables = write_data(tmp_path)
    with pytest.raises(PlanningNeedsModelError, match=r"real LLM tier.*semray models"):
        semray.ask(QUESTION, tables=tables, settings=Settings(state_dir=tmp_path / "state"), dry_run=True)


def test_ask_replays_recorded_answers_to_a_validated_plan(tmp_path: Path) -> None:
    tables = write_data(tmp_path)
    result = semray.ask(
        QUESTION,
        tables=tables,
        settings=Settings(state_dir=tmp_path / "state"),
        replay=_recording(tmp_path),
        dry_run=True,
    )
    assert result.answer is None and result.run_id is None
    assert result.datasets == ("reviews", "products")
    assert plan_from_json(result.plan_json).op == "aggregate"
    fill = next(step for step in result.steps if step.agent == "manipulation")
    assert (fill.input_tokens, fill.output_tokens) == (1000, 200)
    assert fill.dollars > 0  # priced as the configured large tier charges


def test_the_cli_dry_run_prints_a_plan_semray_run_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tables = write_data(tmp_path)
    out = tmp_path / "plan.json"
    code = main(
        [
            "--state-dir",
            str(tmp_path / "state"),
            "ask",
            QUESTION,
            "--dry-run",
            "--explain",
            "--replay",
            str(_recording(tmp_path)),
            "--plan-out",
            str(out),
            *(arg for name, path in tables.items() for arg in ("-t", f"{name}={path}")),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0
    assert plan_from_json(out.read_text(encoding="utf-8")) == plan_from_json(captured.out)
    assert "manipulation/fill" in captured.err and "datasets: reviews, products" in captured.err


def test_the_cli_refuses_on_simulated_tiers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tables = write_data(tmp_path)
    code = main(
        ["--state-dir", str(tmp_path / "state"), "ask", QUESTION, "--dry-run", "-t", f"reviews={tables['reviews']}"]
    )
    assert code == 2
    assert "planning needs a real LLM tier" in capsys.readouterr().err
