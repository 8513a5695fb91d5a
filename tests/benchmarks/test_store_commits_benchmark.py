"""The store-commit benchmark at a tiny size: every store and batch size timed, the section written."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import store_commits


def test_a_tiny_run_times_every_store_and_batch_size(tmp_path: Path) -> None:
    arguments = ["--batches", "3", "--results-dir", str(tmp_path / "results"), "--out-dir", str(tmp_path / "out")]
    assert store_commits.main(arguments) == 0
    figures = json.loads((tmp_path / "results" / "store_commits.json").read_text())["figures"]
    assert set(figures) == {f"{store}/{size}" for store in ("none", "file", "s3") for size in ("small", "large")}
    assert all(f["wall_median_ms"] > 0 and f["cpu_ms"] > 0 for f in figures.values())
    assert (tmp_path / "RESULTS.md").read_text().count("(`store_commits`)") == 1
