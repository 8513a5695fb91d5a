"""The cache_store benchmark at a tiny size, on a file:// store: every step moves what it should."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import cache_store


def test_a_tiny_run_pushes_and_pulls_every_entry(tmp_path: Path) -> None:
    results = tmp_path / "results"
    assert cache_store.main(["--entries", "50", "--stores", "file", "--results-dir", str(results)]) == 0
    (run,) = json.loads((results / "cache_store.json").read_text())["figures"]["runs"]
    moved = {step: run[step]["entries"] for step in ("push_all", "push_idle", "push_100", "pull_all", "pull_idle")}
    assert moved == {"push_all": 50, "push_idle": 0, "push_100": 100, "pull_all": 150, "pull_idle": 0}
    assert run["segments"] == 2 and "| file:// | 50 |" in (tmp_path / "RESULTS.md").read_text()
