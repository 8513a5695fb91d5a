"""Statistics measured inside a run: what estimation labels cost, and how many execution reuses.

    .venv/bin/python -m benchmarks.measure_run [--rows 1200] [--budget 100] [--quality 0.9]

The medical symptoms of ../shared/data/medical, filtered ("suggest an infection") then
classified into the 24 diagnoses, through the whole engine on a local Ray with the simulated
tiers of ``benchmarks.cascade`` (small 20% wrong, large 3% wrong, priced like hosted models;
MiniLM embeddings; response cache off, so calls are calls). Four runs:

* ``written``: tiers as written (``auto`` runs on the large tier);
* ``policy``: ``MinCost(quality)`` on the cost model's default statistics (nothing measured);
* ``measured``: ``MinCost(quality)`` with ``measure=MeasureOptions(budget)``: one run measures,
  plans and executes, reusing the labels it bought;
* ``same plan alone``: the plan the measured run chose, run in a fresh run without measuring,
  so ``calls(same plan alone) - (calls(measured) - estimation calls)`` answers are the ones the
  measured run's execution took from its estimation labels instead of asking again.

Per run: calls, dollars, rows per ledger key (estimation keys ``answers:...`` apart), chosen
tiers, and agreement with the written (all-large) run and with the labels: the share of the input
rows whose outcome (dropped, or kept with a diagnosis) is the same. Beside what each run paid, the
cost model's estimate of the plan that ran (``estimated``: low, value, high; made with what the
planner knew: the sources' row counts, plus the measured statistics for the measured runs), each
cascade's priced split (embedding and small shares, and whether they were assumed), and the
all-large plan priced on the measured statistics (``all_large_estimated``): the choice MinCost
weighed the chosen plan against.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.cascade import _medical, _serving
from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso, run_benchmark

NAME = "measure_run"
FILTER = "{symptoms} suggest an infection"
CLASSIFY = "the diagnosis suggested by these symptoms: {symptoms}"


def _answers(table: pa.Table) -> dict[str, str]:
    ids = table.column("symptom_id").to_pylist()
    return dict(zip(ids, table.column("diagnosis_answer").to_pylist(), strict=True))


def _agreement(answers: dict[str, str], reference: dict[str, str], ids: list[str]) -> float:
    return sum(answers.get(row) == reference.get(row) for row in ids) / len(ids)


def _ledger(settings: Any, run_id: str) -> dict[str, dict[str, float]]:
    from semray.transactions import show_run

    return {
        operator.operator_key: {
            "rows": operator.rows_in,
            "calls": operator.usage.calls,
            "dollars": round(operator.usage.dollars, 6),
        }
        for operator in show_run(settings, run_id).operators
    }


def _tiers(plan: Any) -> list[str]:
    from semray.operators import walk
    from semray.operators.semantic import Semantic

    return [f"{node.label()}: {node.tier}" for node in walk(plan) if isinstance(node, Semantic)]


def _estimate(plan: Any, statistics: Any, profiles: Any) -> dict[str, Any]:
    """The cost model's dollars for ``plan`` (low, value, high), with each cascade's priced split."""
    from semray.cost_model.cardinality import source_statistics
    from semray.cost_model.cascade_cost import CascadeEstimate
    from semray.cost_model.plan_cost import estimate_plan

    known = source_statistics(plan) if statistics is None else source_statistics(plan).merged(statistics)
    estimate = estimate_plan(plan, known, profiles)
    cascades = {
        op.label: {
            "embedding_share": round(op.cascade.embedding_share.value, 4),
            "small_share": round(op.cascade.small_share.value, 4),
            "assumed": "cascade_shares" in op.assumed,
        }
        for op in estimate.operators
        if isinstance(op, CascadeEstimate) and op.cascade is not None
    }
    dollars = estimate.dollars
    return {"dollars": [round(dollars.low, 4), round(dollars.value, 4), round(dollars.high, 4)], "cascades": cascades}


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import semray
    from semray.cluster.connect import connect, shutdown
    from semray.cost_model.policies import MinCost
    from semray.pipeline.runs.measure_in_run import MeasureOptions
    from semray.settings import Settings

    table, diagnoses = _medical(args.rows)
    ids = table.column("symptom_id").to_pylist()
    infections = {row for row, flag in zip(ids, table.column("infection").to_pylist(), strict=True) if flag == "true"}
    truth = {
        row: diagnosis
        for row, diagnosis in zip(ids, table.column("diagnosis").to_pylist(), strict=True)
        if row in infections
    }
    started_at, load_before = now_iso(), load_average()
    settings = Settings(state_dir=Path(tempfile.mkdtemp(prefix="sr-measure-", dir="/tmp")), num_cpus=2)
    serving = _serving(table, diagnoses, auroc=0.8)
    inputs = table.select(["symptom_id", "symptoms"])
    policy = MinCost(quality=args.quality)
    connect(settings)
    runs: list[dict[str, Any]] = []
    try:

        def query(plan: Any = None) -> Any:
            if plan is not None:
                return semray.api.Query(plan, settings, serving)
            base = semray.from_arrow(inputs, "medical", settings=settings).with_serving(serving)
            return base.sem_filter(FILTER).sem_classify(CLASSIFY, diagnoses, output="diagnosis_answer")

        def run(system: str, make: Any) -> Any:
            started = time.perf_counter()
            result = make()
            seconds = time.perf_counter() - started
            measured = result.measured
            ran = result.plan if result.plan is not None else query().optimized().plan
            estimated = _estimate(ran, result.statistics, query()._profiles())
            figures: dict[str, Any] = {
                "system": system,
                "wall_s": round(seconds, 1),
                "rows_out": result.table.num_rows,
                "calls": result.usage.calls,
                "dollars": round(result.usage.dollars, 6),
                "tiers": _tiers(ran),
                "estimated": estimated["dollars"],
                "cascades": estimated["cascades"],
                "ledger": _ledger(settings, result.run_id),
                "estimation": None
                if measured is None
                else {
                    "labels": measured.labels,
                    "calls": measured.usage.calls,
                    "dollars": round(measured.usage.dollars, 6),
                    "per_operator": [cost.to_json() for cost in measured.costs],
                    "presampled": [list(item) for item in measured.presampled],
                },
                "answers": _answers(result.table),
            }
            print({k: v for k, v in figures.items() if k not in ("answers", "ledger")}, file=sys.stderr)
            return result, figures

        _, written = run("written", lambda: query().execute())
        _, unmeasured = run("policy", lambda: query().execute(policy=policy))
        measured_result, measured = run(
            "measured", lambda: query().execute(policy=policy, measure=MeasureOptions(budget=args.budget))
        )
        _, alone = run("same plan alone", lambda: query(measured_result.plan).execute(optimize=False))
        all_large = _estimate(query().plan, measured_result.statistics, query()._profiles())["dollars"]
        reference = written["answers"]
        for figures in (written, unmeasured, measured, alone):
            answers = figures.pop("answers")
            figures["vs_written"] = round(_agreement(answers, reference, ids), 4)
            figures["vs_truth"] = round(_agreement(answers, truth, ids), 4)
            runs.append(figures)
    finally:
        shutdown()
    estimation = measured["estimation"]
    execution_calls = measured["calls"] - estimation["calls"]
    figures = {
        "rows": len(ids),
        "budget": args.budget,
        "quality": args.quality,
        "runs": runs,
        "labels_bought": estimation["labels"],
        "estimation_calls": estimation["calls"],
        "execution_calls": execution_calls,
        "reused_at_execution": alone["calls"] - execution_calls,
        "all_large_estimated": all_large,
        "cascade_pools": (measured_result.measured.to_json()["statistics"]["cascade_pools"])
        if measured_result.measured is not None
        else {},
    }
    return BenchmarkResult(
        name=NAME,
        title="Statistics measured inside a run: estimation labels bought and reused (medical)",
        command=command,
        parameters={key: str(value) for key, value in vars(args).items() if key not in ("results_dir", "out_dir")},
        figures=figures,
        markdown=_markdown(figures),
        started_at=started_at,
        load_before=load_before,
    )


def _markdown(figures: dict[str, Any]) -> str:
    lines = [
        f"{figures['rows']} medical symptom texts, infection filter then 24-way diagnosis; simulated small "
        "(20% wrong) and large (3% wrong) tiers, MiniLM embeddings, cache off; policy "
        f"MinCost(quality={figures['quality']}), {figures['budget']} importance draws per chain. "
        f"Measuring bought {figures['labels_bought']} labels ({figures['estimation_calls']} calls); execution "
        f"then paid {figures['execution_calls']} calls, {figures['reused_at_execution']} fewer than the same plan "
        "run alone (answers reused from estimation).",
        "",
        "| run | tiers | calls | dollars | estimated $ [interval] | vs written | vs truth | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in figures["runs"]:
        tiers = "; ".join(run["tiers"] or [])
        low, value, high = run["estimated"]
        lines.append(
            f"| {run['system']} | {tiers} | {run['calls']} | {run['dollars']:.4f} | {value:.4f} [{low:.4f}, "
            f"{high:.4f}] | {run['vs_written']} | {run['vs_truth']} | {run['wall_s']} |"
        )
    low, value, high = figures["all_large_estimated"]
    lines += [
        "",
        f"All-large priced on the measured statistics: {value:.4f} [{low:.4f}, {high:.4f}]. Cascade splits as "
        "priced (embedding share, small share; assumed = the defaults, not measured):",
        "",
    ]
    for run in figures["runs"]:
        for label, split in run["cascades"].items():
            lines.append(
                f"- {run['system']}: {label}: {split['embedding_share']}, {split['small_share']}"
                + (" (assumed)" if split["assumed"] else "")
            )
    for key, pool in figures["cascade_pools"].items():
        lines.append(f"- pool {key}: {pool}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser(NAME, __doc__ or NAME)
    parser.add_argument("--rows", type=int, default=1200, help="symptom texts (at most 1,200)")
    parser.add_argument("--budget", type=int, default=100, help="importance draws per measured chain")
    parser.add_argument("--quality", type=float, default=0.9, help="the MinCost policy's quality bound")
    return run_benchmark(NAME, parser, body, argv)


if __name__ == "__main__":
    sys.exit(main())
