"""Cascade router on the medical symptoms: all-large vs all-small vs cascades at 0.8 / 0.9 / 0.95.

    .venv/bin/python -m benchmarks.cascade [--rows 1200] [--targets 0.8,0.9,0.95]
        [--latencies zero,api] [--aurocs 0.6,0.7,0.8,0.9] [--operators classify,filter]

Two operators over the 1,200 symptom texts of ../shared/data/medical: classify into the 24
diagnoses, and filter "the symptoms suggest an infection". The tiers are the simulator:
small wrong on 20% of rows (confidence AUROC 0.8), large wrong on 3%, priced like a small and
a large hosted model; the embedding tier is the packaged all-MiniLM-L6-v2. Every run goes
through the whole engine on a local Ray (journaled run, actor pools, Serve tiers), the
response cache off, so calls are calls. Per run: calls, tokens and dollars per tier (from the
run journal), quality against the all-large run's answers (what the cascade promises) and
against the ground-truth labels, wall time, and each cascade's wall-time and dollar ratios to
all-large under the same latencies. At each target the engine chooses (``auto``: a cascade projected
slower than the large tier alone runs on the large tier, ``Settings.cascade_max_slowdown``); when it
chose the large tier the cascade is also run anyway (``forced``), so the projected wall times of both
can be checked against measured ones (the table of projection errors). Then the small tier's
confidence AUROC is swept from 0.6 to 0.9 for the classification cascade at 0.9 (forced; first
latency profile only), reporting the large tier's share.

Latency profiles (`LATENCIES`): ``zero`` answers at once (wall time is the engine's own work);
``api`` gives each call the latency of the hosted models whose prices the tiers carry, and the
small tier the larger rate limit such a model has (see `LATENCIES` for the figures and their
sources). Before anything is timed, every tier of a profile is deployed and the actors' code
loaded by a small cascade, so no timed run pays for a deployment (the embedding tier's replica
loads its model: 10-20 s here, which only the first cascade would otherwise pay), and a small
all-large run loads the single-tier actors' code.
"""

from __future__ import annotations

import argparse
import csv
import math
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
OPERATORS = ("classify", "filter")
PRICES = {"small": (0.15, 0.6), "large": (2.5, 10.0)}  # $ per 1M input / output tokens
LATENCIES: dict[str, dict[str, dict[str, float]]] = {
    "zero": {"small": {}, "large": {}},
    # The prices are gpt-4o-mini's (small) and gpt-4o's (large). A call here sends 100-180 prompt
    # tokens and gets 1-3 back, so its latency is the time to the first token plus a few output
    # tokens: 0.39 s to the first token for GPT-4o on OpenAI (artificialanalysis.ai, "GPT-4o (May
    # '24) providers"), taken for both, and output at 31.7 tokens/s (gpt-4o) against 59.0 (gpt-4o-mini)
    # in one client's run of both (community.openai.com "Inference speed of different models"):
    # 0.39 + 3 / 31.7 = 0.48 s and 0.39 + 3 / 59.0 = 0.44 s a call. The large tier serves 8 calls
    # at once (the simulator's default), the small one 16: OpenAI's usage tier 2 allows gpt-4o
    # 450k tokens a minute (about 2,400 such calls) and gpt-4o-mini 5,000 requests a minute, about
    # twice as many calls (tier 1: 30k vs 200k tokens a minute).
    "api": {
        "small": {"latency_base_s": 0.44, "max_concurrency": 16},
        "large": {"latency_base_s": 0.48, "max_concurrency": 8},
    },
}


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


def _serving(table: pa.Table, diagnoses: tuple[str, ...], auroc: float, latency: str = "zero") -> Any:
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
            **LATENCIES[latency]["small"],
        ),
        "sim-large": ModelProfile(
            error_rate=0.03,
            price_in_per_million=PRICES["large"][0],
            price_out_per_million=PRICES["large"][1],
            **LATENCIES[latency]["large"],
        ),
    }
    simulator = SimulatorConfig.from_labels(
        table, key_column="symptom_id", text_columns=["symptoms"], tasks=tasks, dataset="medical", models=models
    )
    return ServingConfig(simulator=simulator, cache_enabled=False)


def _query(semray: Any, inputs: pa.Table, settings: Any, serving: Any, forced: bool = False) -> Any:
    """The medical inputs on ``serving``; ``forced``: every cascade kept, whatever its projected wall time."""
    if forced:
        settings = settings.model_copy(update={"cascade_max_slowdown": math.inf})
    return semray.from_arrow(inputs, "medical", settings=settings).with_serving(serving)


def _projection(
    semray: Any, inputs: pa.Table, settings: Any, serving: Any, operator: str, diagnoses: Sequence[str], target: float
) -> dict[str, Any]:
    """What the planner projects for the operator at ``target`` (`optimized_choice`, as the run decides)."""
    from semray.pipeline.runs.plan_time.before_run import optimized_choice

    query = _query(semray, inputs, settings, serving)
    if operator == "classify":
        query = query.sem_classify(CLASSIFY, diagnoses, output="diagnosis_answer", quality=target)
    else:
        query = query.sem_filter(FILTER, quality=target)
    choice = optimized_choice(query.plan, settings, serving)
    (verdict,) = choice.choices
    return {
        "chosen": "cascade" if verdict.kept else "large",
        "projected_cascade_s": round(verdict.wall.cascade.value, 1),
        "projected_large_s": round(verdict.wall.large_alone.value, 1),
        "projected_parts_s": {
            "proxies": round(verdict.wall.proxies.value, 1),
            "labels": round(verdict.wall.labels.value, 1),
            "small": round(verdict.wall.small.value, 1),
            "routed": round(verdict.wall.routed.value, 1),
        },
    }


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

        def run(
            operator: str, serving: Any, tier: str, quality: float | None, forced: bool = False
        ) -> tuple[dict[str, Any], dict[str, Any]]:
            query = _query(semray, inputs, settings, serving, forced)
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
                "system": (f"cascade {quality} (forced)" if forced else f"auto {quality}")
                if quality
                else f"all-{tier}",
                "wall_s": round(seconds, 1),
                "calls": result.usage.calls,
                "tokens_in": result.usage.tokens_in,
                "tokens_out": result.usage.tokens_out,
                "dollars": round(result.usage.dollars, 6),
                "per_tier": _per_tier(settings, result.run_id),
                "vs_truth": round(_agreement(answers, truth[operator], ids, operator), 4),
            }
            return figures, answers

        for position, latency in enumerate(args.latencies):
            base = _serving(table, diagnoses, auroc=0.8, latency=latency)
            # A cascade whatever its projection, so the embedding tier is deployed before timing.
            warm = _query(semray, inputs.slice(0, 64), settings, base, forced=True)
            warm.sem_classify(CLASSIFY, diagnoses, output="diagnosis_answer", quality=0.9).execute()
            # And one run on the large tier alone, so the first timed run does not load its actors' code.
            warm.sem_classify(CLASSIFY, diagnoses, output="diagnosis_answer", tier="large").execute()
            for operator in args.operators:
                large, reference = run(operator, base, "large", None)
                large.update(latency=latency, vs_large=1.0)
                runs.append(large)
                small, answers = run(operator, base, "small", None)
                small.update(latency=latency, vs_large=round(_agreement(answers, reference, ids, operator), 4))
                runs.append(small)
                for target in args.targets:
                    projected = _projection(semray, inputs, settings, base, operator, diagnoses, target)
                    # The engine's own choice, then the cascade forced when it chose the large tier, so
                    # the projection of the cascade can be checked against its measured wall time.
                    for forced in (False, True):
                        if forced and projected["chosen"] == "cascade":
                            break
                        figures, answers = run(operator, base, "auto", target, forced)
                        figures.update(latency=latency, target=target, **projected)
                        figures["ran"] = "cascade" if forced else projected["chosen"]
                        figures["vs_large"] = round(_agreement(answers, reference, ids, operator), 4)
                        figures["met"] = figures["vs_large"] >= target
                        figures["wall_ratio"] = round(figures["wall_s"] / large["wall_s"], 3)
                        figures["dollar_ratio"] = round(figures["dollars"] / large["dollars"], 3)
                        runs.append(figures)
                        print(figures, file=sys.stderr)
                if operator == "classify" and position == 0:
                    for auroc in args.aurocs:
                        serving = _serving(table, diagnoses, auroc, latency)
                        figures, answers = run(operator, serving, "auto", 0.9, forced=True)
                        large_rows = figures["per_tier"].get("large_or_pinned", {}).get("rows", 0)
                        sweep.append(
                            {
                                "latency": latency,
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
    figures = {
        "rows": len(ids),
        "runs": runs,
        "auroc_sweep": sweep,
        "prices_per_million": PRICES,
        "latencies": {name: LATENCIES[name] for name in args.latencies},
    }
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
        "cache off, tiers deployed before timing. Quality 'vs large' is agreement with the all-large run "
        "(what the cascade promises, delta 0.05); 'vs truth' with the labels. Rows per tier are rows each tier "
        "answered (the calibration sample is answered by the large tier and reused). Wall and dollar ratios: "
        "against all-large's, same operator and latencies. 'auto' is what the engine chose at the target "
        "(Settings.cascade_max_slowdown 1.0: a cascade projected slower than the large tier alone runs on the "
        "large tier); 'forced' runs the cascade anyway (cascade_max_slowdown inf), to check its projection.",
    ]
    for latency in dict.fromkeys(run.get("latency", "zero") for run in figures["runs"]):
        lines += ["", f"Latencies `{latency}`: {_latency_text(latency)}", ""]
        lines += [
            "| operator | system | ran as | vs large | vs truth | large rows | small rows | calls | dollars | wall s "
            "| projected s (cascade / large alone) | wall ratio | dollar ratio |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for run in figures["runs"]:
            if run.get("latency", "zero") == latency:
                lines.append(_run_line(run))
    errors = _projection_errors(figures["runs"])
    if errors:
        lines += [
            "",
            "Projected against measured wall time (seconds; the projection leaves out the engine's own time common "
            "to both, `semray/cost_model/cascade_wall.py`):",
            "",
            "| latencies | operator | target | chosen | cascade projected | cascade measured | error "
            "| large alone projected | large alone measured | error | projected ratio | measured ratio |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            *errors,
        ]
    slower = [run for run in figures["runs"] if run.get("wall_ratio", 0.0) > 1.0 and "forced" not in run["system"]]
    if slower:
        cases = ", ".join(
            f"{run['operator']} {run['system']} ({run['latency']}, x{run['wall_ratio']})" for run in slower
        )
        lines += [
            "",
            f"**Slower than all-large in wall time although chosen: {cases}.** The projection put the cascade "
            "within cascade_max_slowdown of the large tier alone, and the run was slower.",
        ]
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


def _latency_text(latency: str) -> str:
    profile = LATENCIES.get(latency, {})
    if not any(profile.values()):
        return "every call answered at once."
    return (
        "; ".join(
            f"{tier} {values.get('latency_base_s', 0.0)} s a call, {int(values.get('max_concurrency', 8))} at once"
            for tier, values in profile.items()
        )
        + " (hosted gpt-4o-mini / gpt-4o figures, `benchmarks/cascade.py`)."
    )


def _run_line(run: dict[str, Any]) -> str:
    tiers = run["per_tier"]
    large = tiers.get("large_or_pinned", {}).get("rows", 0) if run["system"] != "all-small" else 0
    small = (
        tiers.get("small", {}).get("rows", 0)
        if run["system"] != "all-small"
        else tiers.get("large_or_pinned", {}).get("rows", 0)
    )
    met = "" if "met" not in run else (" (met)" if run["met"] else " (**missed**)")
    ratios = f"{run['wall_ratio']} | {run['dollar_ratio']}" if "wall_ratio" in run else " | "
    projected = f"{run['projected_cascade_s']} / {run['projected_large_s']}" if "projected_cascade_s" in run else ""
    ran = run.get("ran", run["system"].removeprefix("all-"))
    return (
        f"| {run['operator']} | {run['system']} | {ran} | {run['vs_large']}{met} | {run['vs_truth']} | {large} | "
        f"{small} | {run['calls']} | {run['dollars']:.4f} | {run['wall_s']} | {projected} | {ratios} |"
    )


def _projection_errors(runs: list[dict[str, Any]]) -> list[str]:
    """One line per (latency, operator, target): the projections against the cascade's measured wall time
    (the forced run, or the chosen one when it was the cascade) and the all-large run's."""
    lines = []
    for run in runs:
        if run.get("ran") != "cascade":
            continue
        large = next(
            (
                r
                for r in runs
                if r["system"] == "all-large" and (r["latency"], r["operator"]) == (run["latency"], run["operator"])
            ),
            None,
        )
        if large is None:
            continue
        cascade_error = run["projected_cascade_s"] / run["wall_s"] - 1.0
        large_error = run["projected_large_s"] / large["wall_s"] - 1.0
        projected_ratio = run["projected_cascade_s"] / max(run["projected_large_s"], 1e-9)
        lines.append(
            f"| {run['latency']} | {run['operator']} | {run['target']} | {run['chosen']} "
            f"| {run['projected_cascade_s']} | {run['wall_s']} | {cascade_error:+.0%} "
            f"| {run['projected_large_s']} | {large['wall_s']} | {large_error:+.0%} "
            f"| {projected_ratio:.2f} | {run['wall_ratio']} |"
        )
    return lines


def _names(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in LATENCIES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown latency profile {unknown[0]!r}; known: {', '.join(LATENCIES)}")
    return names


def _operators(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in OPERATORS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown operator {unknown[0] if unknown else text!r}; known: classify, filter"
        )
    return names


def _floats(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser(NAME, __doc__ or NAME)
    parser.add_argument("--rows", type=int, default=1200, help="symptom texts (at most 1,200)")
    parser.add_argument("--targets", type=_floats, default=[0.8, 0.9, 0.95], help="accuracy targets, comma-separated")
    parser.add_argument("--aurocs", type=_floats, default=[0.6, 0.7, 0.8, 0.9], help="small-tier AUROCs to sweep")
    parser.add_argument(
        "--operators", type=_operators, default=list(OPERATORS), help="operators to run, comma-separated"
    )
    parser.add_argument(
        "--latencies",
        type=_names,
        default=list(LATENCIES),
        help=f"latency profiles, comma-separated: {', '.join(LATENCIES)}",
    )
    return run_benchmark(NAME, parser, body, argv)


if __name__ == "__main__":
    sys.exit(main())
