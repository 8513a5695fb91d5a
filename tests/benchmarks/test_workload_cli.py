"""The workloads' shared command skeleton and the peers' step loop, without Ray, a simulator or a peer."""

from __future__ import annotations

import doctest
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness import BenchmarkResult, now_iso
from benchmarks.workloads import enron, medical, reviews
from benchmarks.workloads.report import usage_of

PEERS = Path(__file__).resolve().parents[2] / "benchmarks" / "peers"


@pytest.mark.parametrize(
    "name", ["benchmarks.workloads.cli", "benchmarks.workloads.report", "benchmarks.workloads.reviews"]
)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize(
    ("module", "systems", "seed", "timeout"),
    [
        (enron, "semray,lotus,palimpzest", 1, 1200.0),
        (medical, "semray,lotus,palimpzest", 1, 1800.0),
        (reviews, "semray:default,lotus,palimpzest", 19, 1200.0),
    ],
)
def test_each_workload_keeps_its_defaults_through_the_shared_parser(
    module: Any, systems: str, seed: int, timeout: float, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    def fake_run(name: str, parser: Any, body: Any, argv: Any) -> int:
        seen["args"] = parser.parse_args(argv)
        return 7

    monkeypatch.setattr(module, "run_benchmark", fake_run)
    assert module.main(["--results-dir", str(tmp_path)]) == 7
    args = seen["args"]
    assert (args.systems, args.seed, args.timeout, args.latency_scale, args.merge) == (
        systems,
        seed,
        timeout,
        1.0,
        False,
    )


def test_rerender_rebuilds_the_section_from_stored_rows_without_running(tmp_path: Path) -> None:
    parameters = {
        "rows": 10,
        "seed": 1,
        "join_rows": 4,
        "category_rows": 4,
        "sql_rows": 4,
        "latency_scale": 0.0,
        "limits": {"filter_limit": 1, "cascade_limit": 2, "chain_limit": 1, "self_join_limit": 1},
    }
    figures = {"rows": [{"system": "lotus", "config": "plain", "error": "lotus is not installed"}], "bounds": {}}
    stored = BenchmarkResult("reviews", "t", "c", parameters, figures, "old", now_iso(), [0.0, 0.0, 0.0]).to_json()
    results = tmp_path / "results"
    results.mkdir()
    (results / "reviews.json").write_text(json.dumps(stored), encoding="utf-8")
    assert reviews.main(["--rerender", "--results-dir", str(results)]) == 0
    section = json.loads((results / "reviews.json").read_text(encoding="utf-8"))["markdown"]
    assert "lotus is not installed" in (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert "| filter_limit | lotus (plain) | lotus is not installed |" in section
    assert "- lotus (plain): lotus is not installed" in section


def test_usage_of_falls_back_to_semrays_own_accounting_only_for_semray() -> None:
    own = {"calls": 3, "tokens_in": 10, "tokens_out": 2, "dollars": 0.5}
    ours = {"system": "semray", "config": "small", "semray_usage": {"q": own}}
    assert usage_of(ours, "q") == {"calls": 3, "tokens": 12, "cost_usd": 0.5, "tiers": {"small": {"calls": 3}}}
    assert usage_of({"system": "lotus", "config": "plain", "semray_usage": {"q": own}}, "q") is None


def test_peer_steps_record_answers_errors_and_what_the_peer_cannot_express(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(PEERS))
    sys.modules.pop("peer_common", None)
    peer_common = importlib.import_module("peer_common")
    assert doctest.testmod(peer_common).failed == 0
    snapshots = iter([{"calls": 1}, {"calls": 4}])
    monkeypatch.setattr(peer_common, "read_stats", lambda base_url: next(snapshots))

    def cannot() -> dict[str, Any]:
        raise peer_common.Unsupported("no helper model")

    def fails() -> dict[str, Any]:
        raise ValueError("bad answer")

    steps = {"ok": lambda: {"kept": ["a"]}, "cascade": cannot, "broken": fails, "skipped": cannot}
    spec = {"base_url": "http://127.0.0.1:1/v1", "skip_steps": ["skipped"]}
    assert peer_common.run_steps(spec, steps, "peer 1.0", 0.0, {"x": "y"}) == 0
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answer["steps"] == {"ok": {"kept": ["a"]}}
    assert answer["unsupported"] == {"cascade": "no helper model"}
    assert answer["errors"] == {"broken": "ValueError: bad answer"}
    # the step that cannot be expressed made no calls: no /stats snapshot, no time
    assert list(answer["stats_after"]) == ["ok", "broken"] and "cascade" not in answer["seconds"]
