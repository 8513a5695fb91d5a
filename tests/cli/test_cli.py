"""The semray command: each subcommand, output formats, and clear errors with exit code 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import semray
from semray.cli import main
from semray.settings import Settings


@pytest.fixture
def reviews_csv(tmp_path: Path) -> Path:
    path = tmp_path / "reviews.csv"
    path.write_text("id,product,rating\n1,lamp,5\n2,fan,2\n3,lamp,4\n", encoding="utf-8")
    return path


def state(settings: Settings) -> list[str]:
    return ["--state-dir", str(settings.state_dir)]


def test_schema_prints_versioned_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["$id"].endswith("plan-v1.json")


@pytest.mark.ray
def test_run_and_explain_a_json_plan(
    tmp_path: Path, reviews_csv: Path, ray_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(
        semray.read_csv(reviews_csv).filter("rating >= 4").select("id", "product").to_json(), encoding="utf-8"
    )
    assert main([*state(ray_settings), "run", str(plan), "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["id,product", "1,lamp", "3,lamp"]
    assert main([*state(ray_settings), "run", str(plan), "--format", "json", "--row-ids"]) == 0
    assert [json.loads(line)["_rowid"] for line in capsys.readouterr().out.splitlines()] == ["0", "2"]
    assert main([*state(ray_settings), "explain", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "Logical plan" in out and "Physical plan (Ray Data)" in out and "Filter rating >= 4" in out
    # EXPLAIN ANALYZE: runs it, then each operator's actual rows beside its estimate.
    assert main([*state(ray_settings), "explain", str(plan), "--analyze"]) == 0
    analyzed = capsys.readouterr().out.split("Optimized plan")[1]
    assert re.findall(r"actual: rows (\d+)", analyzed) == ["2", "2", "3"]  # project (as its input), filter, scan


@pytest.mark.ray
def test_parquet_output_is_written_whole(tmp_path: Path, reviews_csv: Path, ray_settings: Settings) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(semray.read_csv(reviews_csv).to_json(), encoding="utf-8")
    out = tmp_path / "out.parquet"
    assert main([*state(ray_settings), "run", str(plan), "--format", "parquet", "-o", str(out)]) == 0
    assert pq.read_table(out).num_rows == 3


@pytest.mark.ray
def test_failed_run_leaves_no_output(
    tmp_path: Path, reviews_csv: Path, ray_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(semray.read_csv(reviews_csv).select(x="CAST(product AS INTEGER)").to_json(), encoding="utf-8")
    out = tmp_path / "out.parquet"
    assert main([*state(ray_settings), "run", str(plan), "--format", "parquet", "-o", str(out)]) == 2
    assert "pipeline failed" in capsys.readouterr().err
    assert not out.exists()
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix == ".parquet"], "no partial output anywhere"


@pytest.mark.ray
def test_sql_command(reviews_csv: Path, ray_settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    query = "SELECT product, count(*) AS n FROM r GROUP BY product ORDER BY product"
    assert main([*state(ray_settings), "sql", query, "-t", f"r={reviews_csv}", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["product,n", "fan,1", "lamp,2"]


@pytest.mark.ray
def test_demo_runs_its_queries(ray_settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*state(ray_settings), "demo", "--rows", "120"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("[") >= 3 and "rows)" in captured.out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "/nonexistent/plan.json"], "not found"),
        (["explain", "/nonexistent/plan.json"], "not found"),
        (["sql", "SELECT * FROM t", "-t", "t=/nonexistent.csv"], "/nonexistent.csv"),
        (["sql", "SELECT * FROM t", "-t", "t"], "NAME=PATH"),
        (["sql", "SELECT * FROM x", "-t", "t=/dev/null.csv"], ""),
    ],
)
def test_bad_input_exits_2_with_a_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    # The session's Ray may forward a worker's log line to stderr at any moment; the CLI's own
    # output is the one line that starts with "error: ".
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert message in line


def test_malformed_plan_names_the_bad_field(
    tmp_path: Path, reviews_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(semray.read_csv(reviews_csv).filter("rating > 1").to_json())
    document["plan"]["input"]["source"]["kind"] = "xls"
    plan = tmp_path / "bad.json"
    plan.write_text(json.dumps(document), encoding="utf-8")
    assert main(["run", str(plan)]) == 2
    assert "plan.filter.input.scan.source.kind" in capsys.readouterr().err


def test_unknown_column_in_plan_suggests(tmp_path: Path, reviews_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(semray.read_csv(reviews_csv).filter("rating > 1").to_json())
    document["plan"]["predicate"] = "ratng > 1"
    plan = tmp_path / "bad.json"
    plan.write_text(json.dumps(document), encoding="utf-8")
    assert main(["run", str(plan)]) == 2
    assert "did you mean 'rating'" in capsys.readouterr().err


def test_empty_and_non_utf8_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    with pytest.raises(semray.SemrayError, match="empty"):
        semray.read_csv(empty)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_bytes(b"caf\xe9 latte")
    source = semray.read_text(folder)
    assert source.columns == ("path", "text")


def test_explain_announces_simulated_tiers() -> None:
    import pyarrow as pa

    text = semray.from_arrow(pa.table({"t": ["a"]})).sem_filter("{t} is good").explain()
    assert "Semantic[filter on large]" in text
    assert "large: simulated sim-large SIMULATED" in text


def test_serve_status_without_a_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    if ray.is_initialized():
        pytest.skip("a cluster is running in this process")
    assert main(["--state-dir", str(tmp_path), "serve", "status"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["backends"]["large"] == "simulated:sim-large" and status["connected"] is False
    profile = tmp_path / "models.toml"
    profile.write_text('app_prefix = "mine"\n[large]\nbackend = "simulated"\nmodel = "sim-small"\n', encoding="utf-8")
    assert main(["--state-dir", str(tmp_path), "serve", "status", "--config", str(profile)]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["backends"]["large"] == "simulated:sim-small"  # --config is the profile compared with


def test_serve_status_help_says_what_config_is_for(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "status", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "compare the deployed tiers with" in text and "matches_profile" in text and "app_prefix" in text


def test_in_memory_tables_are_identified_by_content() -> None:
    import pyarrow as pa

    first = semray.from_arrow(pa.table({"x": [1]}), "t")
    assert semray.from_arrow(pa.table({"x": [1]}), "t").plan == first.plan
    assert semray.from_arrow(pa.table({"x": [2]}), "t").plan != first.plan


def test_sql_quality_asks_for_a_cascade(
    reviews_csv: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    query = "SELECT product FROM r WHERE SEM_FILTER('{product} is for lighting')"
    # The default simulated tiers answer at once: the cascade's proxy pass would make it slower than
    # the large tier alone, so it runs on the large tier and EXPLAIN says why.
    assert main(["sql", query, "-t", f"r={reviews_csv}", "--quality", "recall:0.95", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "Cascade[" not in out and "large tier, not a cascade: projected wall time: cascade" in out
    monkeypatch.setenv("SEMRAY_CASCADE_MAX_SLOWDOWN", "inf")  # dollars first, whatever the wall time
    assert main(["sql", query, "-t", f"r={reviews_csv}", "--quality", "recall:0.95", "--explain"]) == 0
    assert "Cascade[filter: embedding -> small -> large, recall >= 0.95" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["sql", query, "-t", f"r={reviews_csv}", "--quality", "recall:1.5"])
    assert exit_info.value.code == 2
    assert "give a level in (0, 1)" in capsys.readouterr().err


def test_a_quality_target_that_cannot_be_certified_is_said_and_refused_under_strict(
    tmp_path: Path, reviews_csv: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEMRAY_CASCADE_MAX_SLOWDOWN", "inf")  # keep a certifiable cascade (instant simulated tiers)
    query = "SELECT product FROM r WHERE SEM_FILTER('{product} is for lighting')"
    assert main(["sql", query, "-t", f"r={reviews_csv}", "--quality", "0.999", "--explain"]) == 0
    captured = capsys.readouterr()
    assert "WARNING: SemFilter" in captured.out and "cannot be certified with 200 calibration labels" in captured.out
    # Said once: in EXPLAIN's text, not again on standard error.
    assert (captured.out + captured.err).count("calibration labels (at most") == 1
    plan = tmp_path / "plan.json"
    plan.write_text(semray.read_csv(reviews_csv).sem_filter("{product} is for lighting").to_json(), encoding="utf-8")
    assert main(["explain", str(plan), "--quality", "0.999"]) == 0
    captured = capsys.readouterr()
    assert (captured.out + captured.err).count("calibration labels (at most") == 1
    assert "Cascade[" not in captured.out  # it runs on the large tier, not as a cascade that decides nothing
    assert main(["sql", query, "-t", f"r={reviews_csv}", "--quality", "0.999", "--strict", "--explain"]) == 2
    assert "cannot be certified" in capsys.readouterr().err
    assert main(["sql", query, "-t", f"r={reviews_csv}", "--quality", "0.95", "--strict", "--explain"]) == 0
    assert "Cascade[filter" in capsys.readouterr().out
