"""The relational benchmark at tiny sizes: inputs, result checks, and a whole run per system."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from benchmarks import relational


def test_generated_rows_are_deterministic() -> None:
    first, second = relational.generate_table(500), relational.generate_table(500)
    assert first.equals(second) and first.num_rows == 500
    assert set(first.column("region").to_pylist()) <= set(relational.REGIONS)


def test_inputs_are_generated_once(tmp_path: Path) -> None:
    paths = relational.ensure_inputs(tmp_path, 300)
    stamps = {kind: path.stat().st_mtime_ns for kind, path in paths.items()}
    assert relational.ensure_inputs(tmp_path, 300) == paths
    assert {kind: path.stat().st_mtime_ns for kind, path in paths.items()} == stamps


def test_compare_finds_differences() -> None:
    table = pa.table({"category": ["a", "b"], "n": [1, 2], "revenue": [1.0, 2.0], "avg_amount": [1.0, 1.0]})
    assert relational.compare(table, table) is None
    changed = table.set_column(2, "revenue", pa.array([1.0, 2.1]))
    assert relational.compare(table, changed) == "column revenue differs beyond 1e-9"
    assert "groups" in (relational.compare(table, table.slice(0, 1)) or "")


def run(tmp_path: Path, *arguments: str) -> dict[str, object]:
    common = ["--rows", "3000", "--repeats", "1", "--results-dir", str(tmp_path / "results")]
    assert relational.main([*common, "--out-dir", str(tmp_path / "out"), *arguments]) == 0
    data: dict[str, object] = json.loads((tmp_path / "results" / "relational.json").read_text())
    assert (tmp_path / "RESULTS.md").read_text().count("## Relational") == 1
    return data


def test_duckdb_and_pandas_agree_on_parquet_and_csv(tmp_path: Path) -> None:
    data = run(tmp_path, "--systems", "duckdb", "pandas")
    summary = data["figures"]["summary"]  # type: ignore[index]
    assert [(s["format"], s["system"]) for s in summary] == [
        ("parquet", "duckdb"),
        ("parquet", "pandas"),
        ("csv", "duckdb"),
        ("csv", "pandas"),
    ]
    assert [s["result"] for s in summary] == ["reference", "equal", "reference", "equal"]
    assert all(s["peak_pss_bytes"] > 0 for s in summary)


@pytest.mark.slow  # a child process that starts its own Ray: ~14 s
@pytest.mark.ray
def test_semray_agrees_with_duckdb(tmp_path: Path) -> None:
    data = run(tmp_path, "--systems", "semray", "duckdb", "--formats", "parquet", "--quick")
    summary = {s["system"]: s for s in data["figures"]["summary"]}  # type: ignore[index]
    assert summary["semray"]["result"] == "equal"
    assert summary["semray"]["processes"] > 1  # the driver and its Ray processes
