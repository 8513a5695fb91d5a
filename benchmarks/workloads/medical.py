"""Medical: classify 1,200 symptom texts into 24 diagnoses, filter for infections, count diagnoses
joined with the patient table, and a "same diagnosis" self-join over a sample.

    .venv/bin/python -m benchmarks.workloads.medical [--systems semray,lotus,palimpzest] [--join-rows 24]

Every system runs the same four steps against one simulator on 127.0.0.1 whose truth is
``../shared/data/medical`` (``text_diagnosis`` of each symptom text's patient):

1. ``classify``: one of the 24 diagnoses per text (accuracy);
2. ``infection``: a semantic filter "the symptoms suggest an infection" (precision/recall; the
   nine infectious diagnoses are the positives);
3. ``groupby``: join the texts with the patient table on ``patient_id``, classify, then count
   and average age per diagnosis (relative L1 error of the counts, mean absolute error of the ages);
4. ``self_join``: pairs of texts from a seeded sample (``--join-rows``, default 24: two texts from each of 12 diagnoses)
   whose symptoms point to the same diagnosis (precision/recall over unordered pairs).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.harness import BenchmarkResult, require_shared_data, run_benchmark
from benchmarks.workloads.cli import rerendered, run_workload, skip_steps, start, workload_parser
from benchmarks.workloads.definitions import prepare_medical
from benchmarks.workloads.report import (
    cost_table,
    estimate_lines,
    fmt,
    gaps_section,
    goal_lines,
    missing_reason,
    usage_of,
    versions_line,
)
from benchmarks.workloads.scoring import count_error, label_accuracy, pairs, precision_recall

NAME = "medical"


def score(steps: dict[str, Any], truth: dict[str, Any]) -> dict[str, Any]:
    """Per-step quality of a runner's answer; a step that did not run has no entry."""
    quality: dict[str, Any] = {}
    if "classify" in steps:
        quality["classify"] = label_accuracy(steps["classify"].get("diagnosis", {}), truth["diagnosis"])
    if "infection" in steps:
        quality["infection"] = precision_recall(steps["infection"].get("infection", []), truth["infection"]).to_dict()
    if "groupby" in steps:
        groups = {str(k): int(v) for k, v in steps["groupby"].get("groups", {}).items()}
        ages = steps["groupby"].get("avg_age", {})
        errors = [abs(ages[name] - age) for name, age in truth["avg_age"].items() if ages.get(name) is not None]
        quality["groupby"] = count_error(groups, truth["groups"]) | {
            "avg_age_mae": round(sum(errors) / len(errors), 3) if errors else None
        }
    if "self_join" in steps:
        found = pairs(steps["self_join"].get("same_pairs", []))
        quality["self_join"] = precision_recall(found, {tuple(p) for p in truth["same_pairs"]}).to_dict()
    return quality


def _quality(row: dict[str, Any]) -> str:
    quality = row.get("quality") or {}
    parts = []
    if "classify" in quality:
        parts.append(f"acc {fmt(quality['classify']['accuracy'], 3)}")
    if "infection" in quality:
        parts.append(f"infection F1 {fmt(quality['infection']['f1'], 3)}")
    if "groupby" in quality:
        parts.append(f"counts L1 {fmt(quality['groupby']['relative_l1'], 3)}")
    if "self_join" in quality:
        parts.append(f"join F1 {fmt(quality['self_join']['f1'], 3)}")
    return "; ".join(parts) or "–"


STEP_METRICS: dict[str, tuple[str, Callable[[dict[str, Any]], Any]]] = {
    "classify": ("classification accuracy", lambda q: q.get("accuracy")),
    "infection": ("infection filter F1", lambda q: q.get("f1")),
    "groupby": (
        "group counts, 1 - relative L1",
        lambda q: None if q.get("relative_l1") is None else 1 - q["relative_l1"],
    ),
    "self_join": ("self-join F1", lambda q: q.get("f1")),
}


def step_metric(step: str) -> Any:
    def metric(row: dict[str, Any]) -> float | None:
        quality = (row.get("quality") or {}).get(step)
        value = STEP_METRICS[step][1](quality) if quality else None
        return float(value) if value is not None else None

    return metric


def step_tokens(step: str) -> Any:
    def tokens(row: dict[str, Any]) -> int | None:
        usage = usage_of(row, step)
        return int(usage["tokens"]) if usage else None

    return tokens


def step_dollars(step: str) -> Any:
    def dollars(row: dict[str, Any]) -> float | None:
        usage = usage_of(row, step)
        return float(usage["cost_usd"]) if usage else None

    return dollars


def step_table(rows: list[dict[str, Any]]) -> str:
    """Per step and system: quality, then small / large calls and tokens of that step alone."""
    header = "| system | " + " | ".join(STEP_METRICS[step][0] for step in STEP_METRICS) + " |"
    lines = [header, "| --- |" + " --- |" * len(STEP_METRICS)]
    for row in rows:
        cells = []
        for step in STEP_METRICS:
            quality = step_metric(step)(row)
            usage = usage_of(row, step)
            if quality is None or not usage:
                cells.append(missing_reason(row, step))
                continue
            tiers = usage["tiers"]
            calls = " + ".join(f"{tiers[t]['calls']} {t}" for t in ("small", "large") if t in tiers) or "0 calls"
            cells.append(f"{quality:.3f}; {calls}; {usage['tokens']:,} tok; ${usage['cost_usd']:.3f}")
        lines.append(f"| {row['system']} ({row['config']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    texts = "1,200" if args.rows is None else str(args.rows)
    parts = [
        f"{texts} symptom texts (24 diagnoses x 50 in all): classify, an infection filter, a count and average age per "
        "diagnosis joined with the 11,112-row patient table, and a same-diagnosis self-join over a "
        f"{args.join_rows}-text sample ({args.join_rows * args.join_rows} ordered pairs). Same simulated tiers for "
        f"every system over HTTP on 127.0.0.1 (latency scale {args.latency_scale:g}); calls, tokens and dollars are "
        "the simulator's counts for the whole run (all four steps). Quality: classification accuracy; infection "
        "filter F1; relative L1 error of the per-diagnosis counts; self-join F1 over unordered pairs.",
        "",
        versions_line(rows),
        "",
        cost_table(rows, _quality, "quality"),
        "",
        "Per step (quality; calls per tier; tokens; simulated dollars of that step alone):",
        "",
        step_table(rows),
        "",
        "Goal (issue 12): quality within 0.02 of the best peer's at <= 1/5 of its tokens, per step.",
        "",
    ]
    for step, (what, _) in STEP_METRICS.items():
        parts += goal_lines(rows, what, step_metric(step), step_tokens(step), step_dollars(step))
    parts += [""]
    estimates = estimate_lines(rows)
    if estimates:
        parts += [
            "semray's cost model before each step (source row counts, and the statistics the `optimized` run measured; "
            "documented defaults elsewhere) against what the step paid, in the simulator's prices:",
            "",
            *estimates,
            "",
        ]
    parts += gaps_section(rows)
    return "\n".join(parts)


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    run = start(NAME, command)
    data = require_shared_data("medical")
    workload = prepare_medical(data, args.out_dir, args.seed, args.latency_scale, args.join_rows, args.rows)
    rows = run_workload(args, NAME, workload, score, {"skip_steps": skip_steps(args)})
    parameters = {
        "systems": args.systems,
        "seed": args.seed,
        "latency_scale": args.latency_scale,
        "join_rows": args.join_rows,
        "skip": args.skip,
        "rows": args.rows,
    }
    return run.result(
        "Medical: classify, filter, group-by joined with patients, self-join — semray vs LOTUS vs Palimpzest",
        parameters,
        {"rows": rows},
        markdown(rows, args),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = workload_parser(NAME, __doc__ or NAME, systems="semray,lotus,palimpzest", seed=1, timeout=1800.0)
    parser.add_argument(
        "--join-rows", type=int, default=24, help="texts in the self-join sample (two from each of N/2 diagnoses)"
    )
    parser.add_argument("--rows", type=int, default=None, help="use only the first N symptom texts (smoke runs)")
    parser.add_argument("--skip", default="", help="comma-separated steps to leave out (e.g. self_join)")
    done = rerendered(
        NAME, parser, argv, lambda data: markdown(data["figures"]["rows"], argparse.Namespace(**data["parameters"]))
    )
    return run_benchmark(NAME, parser, body, argv) if done is None else done


if __name__ == "__main__":
    sys.exit(main())
