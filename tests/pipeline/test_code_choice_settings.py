"""``Settings.code_choice`` (SEMRAY_CODE_CHOICE, ``--code-choice``) makes the optimizer's code
choice for SQL, JSON plans and the CLI as ``Query.with_code_choice`` does from Python. The choice
is journaled by a finished run with a stand-in large tier (recorded function, per-row answers from
labels), so these plans find its trial and EXPLAIN shows the chosen function with no model call
and no tier started; without the setting the same plans keep the per-row extraction."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from test_code_choice import GOOD, RAW, SAMPLE, TRUTH, StandIn

from semray.cli import main
from semray.cost_model.prices import profiles_from_serving
from semray.operators import plan_to_json
from semray.pipeline.runs.plan_time.code_choice import CodeChoice, choice_run_identity, choose_code
from semray.query import Query
from semray.readers import load_plan, sql
from semray.serving.profiles import load_profile
from semray.settings import Settings
from semray.transactions import begin_run

CHOSEN = "instead of per-row SemExtract"
SELECT = "SELECT SEM_EXTRACT('The date written in {raw}', 'day: date') FROM dates"
PROFILE = (
    '[large]\nbackend = "openai"\nmodel = "recorded-large"\nbase_url = "http://127.0.0.1:9/v1"\n'
    "prices = { input_per_million = 2.5, output_per_million = 10.0 }\n"
)


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("the journaled choice must be reused without connecting or starting tiers")

    # EXPLAIN imports the execution module, which binds connect and start_tiers by name: imported
    # while they are patched it would keep the refusal for the rest of the session's Ray tests
    importlib.import_module("semray.pipeline.runs.execute")
    monkeypatch.setattr("semray.cluster.connect.connect", refuse)
    monkeypatch.setattr("semray.serving.deployments.start_tiers", refuse)


@pytest.fixture
def journaled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, Path]:
    """Settings whose model profile names a real (unreachable) large tier, and a finished choice
    run at target 0.9 for ``SELECT`` over a dates CSV: the function passed."""
    monkeypatch.delenv("SEMRAY_CODE_CHOICE", raising=False)
    pacsv.write_csv(pa.table({"raw": RAW}), tmp_path / "dates.csv")
    (tmp_path / "semray.toml").write_text(PROFILE, encoding="utf-8")
    settings = Settings(state_dir=tmp_path / "state", models=tmp_path / "semray.toml")
    plan = dates(settings, tmp_path).plan
    serving, choice = load_profile(tmp_path / "semray.toml"), CodeChoice(target=0.9)
    document = json.loads(plan_to_json(plan, indent=None))
    run = begin_run(settings, document, None, plan_fingerprint=choice_run_identity(plan, serving, choice))
    model = StandIn([GOOD])
    choose_code(plan, model.ask, lambda _: SAMPLE, profiles_from_serving(serving), choice, ledger=run.ledger)
    run.finish("succeeded")
    assert model.code_calls == 1
    return settings, tmp_path


def dates(settings: Settings, folder: Path) -> Query:
    return sql(SELECT, {"dates": folder / "dates.csv"}, settings)


def on(settings: Settings, target: float | None = 0.9) -> Settings:
    return settings.model_copy(update={"code_choice": target})


def test_off_by_default_and_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEMRAY_CODE_CHOICE", raising=False)
    assert Settings().code_choice is None
    monkeypatch.setenv("SEMRAY_CODE_CHOICE", "0.95")
    assert Settings().code_choice == 0.95


def test_sql_reaches_the_choice_through_the_setting(journaled: tuple[Settings, Path], no_cluster: None) -> None:
    settings, folder = journaled
    assert CHOSEN not in dates(settings, folder).explain()
    assert CHOSEN in dates(on(settings), folder).explain()
    assert CHOSEN not in dates(on(settings), folder).explain(optimize=False)  # a choice of the optimizer


def test_a_json_plan_reaches_the_choice_through_the_setting(journaled: tuple[Settings, Path], no_cluster: None) -> None:
    settings, folder = journaled
    (folder / "plan.json").write_text(dates(settings, folder).to_json(), encoding="utf-8")
    assert CHOSEN not in load_plan(folder / "plan.json", settings).explain()
    assert CHOSEN in load_plan(folder / "plan.json", on(settings)).explain()


def test_with_code_choice_applies_it_once_and_none_turns_it_off(
    journaled: tuple[Settings, Path], no_cluster: None
) -> None:
    settings, folder = journaled
    chosen = dates(on(settings), folder).with_code_choice(0.9)
    assert CHOSEN in chosen.explain() and chosen.settings.code_choice is None  # the plan carries the choice
    assert CHOSEN not in dates(on(settings), folder).with_code_choice(None).explain()


def test_the_cli_takes_a_flag_and_the_environment(
    journaled: tuple[Settings, Path], no_cluster: None, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    settings, folder = journaled
    (folder / "plan.json").write_text(dates(settings, folder).to_json(), encoding="utf-8")
    common = ["--state-dir", str(folder / "state"), "--models", str(folder / "semray.toml")]
    table = ["--table", f"dates={folder / 'dates.csv'}"]

    def explained(*argv: str) -> str:
        assert main([*common, *argv]) == 0
        return str(capsys.readouterr().out)

    assert CHOSEN not in explained("explain", str(folder / "plan.json"))
    assert CHOSEN in explained("explain", str(folder / "plan.json"), "--code-choice", "0.9")
    assert CHOSEN in explained("sql", SELECT, *table, "--explain", "--code-choice", "0.9")
    monkeypatch.setenv("SEMRAY_CODE_CHOICE", "0.9")
    assert CHOSEN in explained("sql", SELECT, *table, "--explain")


def test_the_flag_refuses_a_target_outside_0_to_1(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        main(["explain", "plan.json", "--code-choice", "1.5"])
    assert "share of agreeing rows" in capsys.readouterr().err


@pytest.mark.ray
def test_a_run_under_the_setting_runs_the_chosen_function(journaled: tuple[Settings, Path]) -> None:
    settings, folder = journaled
    result = dates(on(settings.model_copy(update={"num_cpus": 2})), folder).execute()
    days = [str(day) for day in result.table["day"].to_pylist()]
    assert days == [TRUTH[raw] for raw in RAW]  # the function's values, sandboxed on a local Ray
    assert result.run_id is None  # no model call: the per-row extraction (whose tier is unreachable) did not run
