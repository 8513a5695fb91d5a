"""``benchmarks.vector_index_growth``: the probe runs both modes at a tiny size and reports every step.

Its figures (memory, recall after ``optimize()``) are a measurement, not asserted here: this checks that the
probe still drives LanceDB's API as the note in ``benchmarks/notes/ingest_simulated.md`` says it does.
"""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks import vector_index_growth


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, object]]:
    monkeypatch.setattr(sys, "argv", ["vector_index_growth", *argv])
    vector_index_growth.main()
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_the_incremental_mode_builds_once_then_indexes_each_chunk(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _run(monkeypatch, capsys, "incremental", "3000", "--first", "2000", "--chunk", "500", "--partitions", "2")
    steps = [line["step"] for line in lines if "step" in line]
    assert steps == ["add", "create_index", "add_2000", "optimize_2000", "add_2500", "optimize_2500"]
    indexed = [line for line in lines if "indexed" in line]
    assert [line["indexed"] for line in indexed] == [2500, 3000]
    assert all(line["unindexed"] == 0 for line in indexed)
    summary = lines[-1]
    assert summary["mode"] == "incremental" and summary["rows"] == 3000
    assert 0.0 < float(str(summary["recall"])) <= 1.0


def test_the_full_mode_is_one_add_and_one_build(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _run(monkeypatch, capsys, "full", "2000", "--partitions", "2")
    assert [line["step"] for line in lines if "step" in line] == ["add", "create_index"]
    assert lines[-1]["rows"] == 2000 and float(str(lines[-1]["peak_over_start"])) >= 0  # RSS can stay flat at this size
