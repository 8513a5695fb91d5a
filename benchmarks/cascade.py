"""Cascade router on the medical symptoms: all-large vs all-small vs cascades at 0.8 / 0.9 / 0.95.

    .venv/bin/python -m benchmarks.cascade [--rows 1200] [--aurocs 0.6,0.7,0.8,0.9]

Two operators over the 1,200 symptom texts of ../shared/data/medical: classify into the 24
diagnoses, and filter "the symptoms suggest an infection". The tiers are the simulator:
small wrong on 20% of rows (confidence AUROC 0.8), large wrong on 3%, priced like a small and
a large hosted model; the embedding tier is the packaged all-MiniLM-L6-v2. Every run goes
through the whole engine on a local Ray (journaled run, actor pools, Serve tiers), the
response cache off, so calls are calls. Per run: calls, tokens and dollars per tier (from the
run journal), quality against the all-large run's answers (what the cascade promises) and
against the ground-truth labels, wall time. Then the small tier's confidence AUROC is swept
from 0.6 to 0.9 for the classification cascade at 0.9, reporting the large tier's share.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso, run_benchmark
from benchmarks.harness.data import require_shared_data
from benchmarks.workloads.definitions import INFECTIONS

NAME = "cascade"
CLASSIFY = "the diagnosis suggested by these symptoms: {symptoms}"
FILTER = "{symptoms} suggest an infection"
PRICES = {"small": (0.15, 0.6), "large": (2.5, 10.0)}  # $ per 1M input / output tokens


def _medical(rows: int) -> tuple[pa.Table, tuple[str, ...]]:
    folder = require_shared_data("medical")
    with (folder / "patient_data_with_labels.csv").open(newline="") as handle:
        diagnosis_of = {row["patient_id"]: row["text_diagnosis"] for row in csv.DictReader(handle)}
    with (folder / "text_symptoms_data.csv").open(newline="") as handle:
        records = [
            (row["symptom_id"], row["symptoms"], diagnosis_of[row["patient_id"]]) for row in csv.DictReader(handle)
        ]
    records = records[:rows]
    table = pa.table(
        {
            "symptom_id": [r[0] for r in records],
            "symptoms": [r[1] for r in records],
            "diagnosis": [r[2] for r in records],
            "infection": ["true" if r[2] in INFECTIONS else "false" for r in records],
        }
    )
    return table, tuple(sorted({r[2] for r in records}))


def _serving(table: pa.Table, diagnoses: tuple[str, ...], auroc: float) -> Any:
    from semray.serving.config import ServingConfig
    from semray.serving.simulator.config import ConfidenceProfile, ModelProfile, SimulatorConfig, TaskSpec

    tasks = [
        TaskSpec(name="diagnosis", kind="label", label_column="diagnosis", choices=diagnoses, keywords=("diagnosis",)),
        TaskSpec(
            name="infection", kind="filter", label_column="infection", true_values=("true",), keywords=("infection",)
        ),
    ]
    models = {
        "sim-small": ModelProfile(
            error_rate=0.2,
            confidence=ConfidenceProfile(auroc=auroc),
            price_in_per_million=PRICES["small"][0],
            price_out_per_million=PRICES["small"][1],
        ),
        "sim-large": ModelProfile(
            error_rate=0.03, price_in_per_million=PRICES["large"][0], price_out_per_million=PRICES["large"][1]
        ),
    }
    simulator = SimulatorConfig.from_labels(
        table, key_column="symptom_id", text_columns=["symptoms"], tasks=tasks, dataset="medical", models=models
    )
    return ServingConfig(simulator=simulator, cache_enabled=False)


def _answers(table: pa.Table, operator: str) -> dict[str, Any]:
    if operator == "classify":
        return dict(
            zip(table.column("symptom_id").to_pylist(), table.column("diagnosis_answer").to_pylist(), strict=True)
        )
    return {row: True for row in table.column("symptom_id").to_pylist()}


def _agreement(answers: dict[str, Any], reference: dict[str, Any], ids: list[str], operator: str) -> float:
    if operator == "classify":
        return sum(answers.get(row) == reference.get(row) for row in ids) / len(ids)
    return sum(bool(answers.get(row)) == bool(reference.get(row)) for row in ids) / len(ids)


def _per_tier(settings: Any, run_id: str) -> dict[str, dict[str, float]]:
    from semray.transactions import show_run

    tiers: dict[str, dict[str, float]] = {}
    for operator in show_run(settings, run_id).operators:
        suffix = operator.operator_key.partition(":")[2]
        if suffix == "calibration":
            continue
        usage = operator.usage
        tiers[suffix or "large_or_pinned"] = {
            "rows": operator.rows_in,
            "calls": usage.calls,
            "tokens_in": usage.tokens_in,
            "tokens_out": usage.tokens_out,
            "dollars": round(usage.dollars, 6),
        }
    return tiers


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import semray
    from semray.cluster.connect import connect, shutdown
    from semray.settings import Settings

    table, diagnoses = _medical(args.rows)
    ids = table.column("symptom_id").to_pylist()
    truth = {
        "classify": dict(zip(ids, table.column("diagnosis").to_pylist(), strict=True)),
        "filter": {row: value == "true" for row, value in zip(ids, table.column("infection").to_pylist(), strict=True)},
    }
    started_at, load_before = now_iso(), load_average()
    settings = Settings(state_dir=Path(tempfile.mkdtemp(prefix="sr-cascade-", dir="/tmp")), num_cpus=2)
    inputs = table.select(["symptom_id", "symptoms"])
    connect(settings)
    runs: list[dict[str, Any]] = []
    sweep: list[dict[str, Any]] = []
    try:

        def run(operator: str, serving: Any, tier: str, quality: float | None) -> tuple[dict[str, Any], dict[str, Any]]:
            query = semray.from_arrow(inputs, "medical", settings=settings).with_serving(serving)
            if operator == "classify":
                query = query.sem_classify(CLASSIFY, diagnoses, output="diagnosis_answer", tier=tier, quality=quality)
            else:
                query = query.sem_filter(FILTER, tier=tier, quality=quality)
            started = time.perf_counter()
            result = query.execute()
            seconds = time.perf_counter() - started
            answers = _answers(result.table, operator)
            figures = {
                "operator": operator,
                "system": f"cascade {quality}" if quality else f"all-{tier}",
                "wall_s": round(seconds, 1),
                "calls": result.usage.calls,
                "tokens_in": result.usage.tokens_in,
                "tokens_out": result.usage.tokens_out,
                "dollars": round(result.usage.dollars, 6),
                "per_tier": _per_tier(settings, result.run_id),
                "vs_truth": round(_agreement(answers, truth[operator], ids, operator), 4),
            }
            return figures, answers

        base = _serving(table, diagnoses, auroc=0.8)
        for operator in ("classify", "filter"):
            large, reference = run(operator, base, "large", None)
            large["vs_large"] = 1.0
            runs.append(large)
            small, answers = run(operator, base, "small", None)
            small["vs_large"] = round(_agreement(answers, reference, ids, operator), 4)
            runs.append(small)
            for target in args.targets:
                figures, answers = run(operator, base, "auto", target)
                figures["target"] = target
                figures["vs_large"] = round(_agreement(answers, reference, ids, operator), 4)
                figures["met"] = figures["vs_large"] >= target
                runs.append(figures)
                print(figures, file=sys.stderr)
            if operator == "classify":
                for auroc in args.aurocs:
                    figures, answers = run(operator, _serving(table, diagnoses, auroc), "auto", 0.9)
                    large_rows = figures["per_tier"].get("large_or_pinned", {}).get("rows", 0)
                    sweep.append(
                        {
                            "auroc": auroc,
                            "large_fraction": round(large_rows / len(ids), 4),
                            "small_rows": figures["per_tier"].get("small", {}).get("rows", 0),
                            "dollars": figures["dollars"],
                            "vs_large": round(_agreement(answers, reference, ids, operator), 4),
                        }
                    )
                    print(sweep[-1], file=sys.stderr)
    finally:
        shutdown()
    figures = {"rows": len(ids), "runs": runs, "auroc_sweep": sweep, "prices_per_million": PRICES}
    return BenchmarkResult(
        name=NAME,
        title="Cascade router: all-large, all-small and cascades on the medical symptoms",
        command=command,
        parameters={key: str(value) for key, value in vars(args).items() if key not in ("results_dir", "out_dir")},
        figures=figures,
        markdown=_markdown(figures),
        started_at=started_at,
        load_before=load_before,
    )


def _markdown(figures: dict[str, Any]) -> str:
    lines = [
        f"{figures['rows']} medical symptom texts; simulated small (20% wrong, confidence AUROC 0.8, "
        f"${PRICES['small'][0]}/${PRICES['small'][1]} per 1M tokens in/out) and large (3% wrong, "
        f"${PRICES['large'][0]}/${PRICES['large'][1]}) tiers, MiniLM embeddings; the whole engine on a local Ray, "
        "cache off. Quality 'vs large' is agreement with the all-large run (what the cascade promises, "
        "delta 0.05); 'vs truth' with the labels. Rows per tier are rows each tier answered (the calibration "
        "sample is answered by the large tier and reused).",
        "",
        "| operator | system | vs large | vs truth | large rows | small rows | calls | dollars | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in figures["runs"]:
        tiers = run["per_tier"]
        large = tiers.get("large_or_pinned", {}).get("rows", 0) if run["system"] != "all-small" else 0
        small = (
            tiers.get("small", {}).get("rows", 0)
            if run["system"] != "all-small"
            else tiers.get("large_or_pinned", {}).get("rows", 0)
        )
        met = "" if "met" not in run else (" (met)" if run["met"] else " (**missed**)")
        lines.append(
            f"| {run['operator']} | {run['system']} | {run['vs_large']}{met} | {run['vs_truth']} | {large} | {small} | "
            f"{run['calls']} | {run['dollars']:.4f} | {run['wall_s']} |"
        )
    if figures["auroc_sweep"]:
        lines += [
            "",
            "Small tier's confidence AUROC swept, classification cascade at accuracy 0.9:",
            "",
            "| AUROC | large-tier fraction | small rows | dollars | vs large |",
            "| --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {s['auroc']} | {s['large_fraction']} | {s['small_rows']} | {s['dollars']:.4f} | {s['vs_large']} |"
            for s in figures["auroc_sweep"]
        ]
    return "\n".join(lines)


def _floats(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser(NAME, __doc__ or NAME)
    parser.add_argument("--rows", type=int, default=1200, help="symptom texts (at most 1,200)")
    parser.add_argument("--targets", type=_floats, default=[0.8, 0.9, 0.95], help="accuracy targets, comma-separated")
    parser.add_argument("--aurocs", type=_floats, default=[0.6, 0.7, 0.8, 0.9], help="small-tier AUROCs to sweep")
    return run_benchmark(NAME, parser, body, argv)


if __name__ == "__main__":
    sys.exit(main())
