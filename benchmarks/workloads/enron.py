"""Enron legal discovery: two semantic filters then extraction of sender and subject, on 250 labelled emails.

    .venv/bin/python -m benchmarks.workloads.enron [--systems semray,lotus,palimpzest] [--latency-scale 1]

semray (default and small-tier configs), LOTUS (plain, and with a helper model and cascade
arguments) and Palimpzest (plain, and with both models under a quality-constrained policy)
each run sem_filter(fraud scheme) -> sem_filter(not quoting news) -> extract(sender, subject)
against one simulator, served on 127.0.0.1, whose truth is ``../shared/data/enron`` labels.
Scores: precision/recall/F1 on the 13 positives; extraction accuracy (sender and subject,
normalised) over the true positives a system returned.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.harness import BenchmarkResult, require_shared_data, run_benchmark
from benchmarks.workloads.cli import rerendered, run_workload, start, workload_parser
from benchmarks.workloads.definitions import prepare_enron
from benchmarks.workloads.report import cost_table, estimate_lines, fmt, gaps_section, goal_lines, versions_line
from benchmarks.workloads.scoring import extraction_accuracy, precision_recall

NAME = "enron"


def score(steps: dict[str, Any], truth: dict[str, Any]) -> dict[str, Any]:
    """Precision/recall of the kept emails and extraction accuracy, from a runner's ``pipeline`` step."""
    step = steps.get("pipeline")
    if not step:
        return {}
    kept = step.get("kept", [])
    extracted = {name: step.get("extracted", {}).get(name, {}) for name in kept}
    positives = truth["positives"]
    expected = {name: truth["extractions"][name] for name in positives}
    return {
        "filter": precision_recall(kept, positives).to_dict(),
        "extraction": extraction_accuracy(extracted, expected, ("sender", "subject")),
    }


def _quality(row: dict[str, Any]) -> str:
    quality = row.get("quality") or {}
    if not quality:
        return "–"
    f, x = quality["filter"], quality["extraction"]
    return f"P {fmt(f['precision'], 2)} R {fmt(f['recall'], 2)} F1 {fmt(f['f1'], 2)}; extract {fmt(x['accuracy'], 2)}"


def _f1(row: dict[str, Any]) -> float | None:
    value = (row.get("quality") or {}).get("filter", {}).get("f1")
    return float(value) if value is not None else None


def _extraction(row: dict[str, Any]) -> float | None:
    value = (row.get("quality") or {}).get("extraction", {}).get("accuracy_over_all_positives")
    return float(value) if value is not None else None


def _tokens(row: dict[str, Any]) -> int | None:
    tokens = row.get("simulator", {}).get("tokens")
    return int(tokens) if tokens is not None else None


def _dollars(row: dict[str, Any]) -> float | None:
    dollars = row.get("simulator", {}).get("cost_usd")
    return float(dollars) if dollars is not None else None


def markdown(rows: list[dict[str, Any]], latency_scale: float) -> str:
    parts = [
        "Two semantic filters (fraud scheme; not quoting outside news) then extraction of sender and subject over "
        "250 Enron emails (13 positives). Every system talks to the same simulated small (`gpt-4o-mini` name) and "
        f"large (`gpt-4o` name) tiers over HTTP on 127.0.0.1 (latency scale {latency_scale:g}); calls, tokens and "
        "dollars are the simulator's own counts for each run. Quality: precision / recall / F1 on the positives, "
        "extraction accuracy (both fields, normalised) over returned true positives. Runs that send every "
        "row to the same model get identical answers (the simulator's errors depend on the model and the question, "
        "not the wording): quality differences come from model choice and cascades, token differences from each "
        "system's prompts.",
        "",
        versions_line(rows),
        "",
        cost_table(rows, _quality, "quality (P / R / F1; extraction)"),
    ]
    parts += [
        "",
        "Goal (issue 12): quality within 0.02 of the best peer's at <= 1/5 of its tokens.",
        "",
        *goal_lines(rows, "filter F1", _f1, _tokens, _dollars),
        *goal_lines(rows, "extraction accuracy over all positives", _extraction, _tokens, _dollars),
    ]
    estimates = estimate_lines(rows)
    if estimates:
        parts += [
            "",
            "semray's cost model before each step (source row counts, and the statistics the `optimized` run measured; "
            "documented defaults elsewhere) against what the step paid, in the simulator's prices:",
            "",
            *estimates,
        ]
    missing = gaps_section(rows)
    if missing:
        parts += ["", *missing]
    return "\n".join(parts)


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    run = start(NAME, command)
    workload = prepare_enron(require_shared_data("enron"), args.out_dir, args.seed, args.latency_scale)
    rows = run_workload(args, NAME, workload, score)
    return run.result(
        "Enron: filter, filter, extract — semray vs LOTUS vs Palimpzest on the same simulated models",
        {"systems": args.systems, "seed": args.seed, "latency_scale": args.latency_scale},
        {"rows": rows},
        markdown(rows, args.latency_scale),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = workload_parser(NAME, __doc__ or NAME, systems="semray,lotus,palimpzest", seed=1, timeout=1200.0)
    done = rerendered(
        NAME, parser, argv, lambda data: markdown(data["figures"]["rows"], data["parameters"]["latency_scale"])
    )
    return run_benchmark(NAME, parser, body, argv) if done is None else done


if __name__ == "__main__":
    sys.exit(main())
