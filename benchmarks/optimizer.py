"""Optimizer: model selection against exhaustive enumeration, and optimized vs naive plans.

    .venv/bin/python -m benchmarks.optimizer                     # 60 small plans, both workloads
    .venv/bin/python -m benchmarks.optimizer --plans 20 --skip-if-missing

**Chosen vs exhaustive.** ``--plans`` generated chains of 2-6 semantic operators (filters,
maps, classifications) over a 10,000-row source, each with random measured statistics
(selectivities, prompt tokens per row, the small tier's quality per operator, and the shares
of rows a cascade's embedding and small stages decide). For quality targets 0.80-0.95 under
``MinCost``, the greedy selection's estimated dollars are compared with the best of every tier
assignment over the ladder large / cascade / small (filters and classifications may cascade,
at the target `allocate_cascade_targets` gives them; up to ``3^n`` estimates through
``estimate_plan``).

(`benchmarks.optimizer_exhaustive`.)

**Optimized vs naive.** Two multi-operator queries over ``../shared/data``, each run twice by
a label-driven evaluator (no Ray, no model): the written plan with every semantic operator on
the large tier, and ``optimize(plan, statistics, profiles, MinCost(0.9))``. Answers come from
the labels; the small tier errs on a seeded 4% of rows per filter and 10% per classification
or extraction (the large tier is the labels). Statistics are what a 60-row uniform labelled
sample says (selectivity with a Wilson interval, mean prompt tokens) plus the configured
small-tier quality. Tokens are ``len(prompt) / 4``; prices: large $2.50 / $10 per M tokens
in / out, small $0.15 / $0.60, embedding free (MiniLM on the CPU).

Medical is optimized twice: without the cascade rung (tiers large / small, as before cascades
could be priced) and with it. A cascade is evaluated the way `semray.pipeline.ray.cascade` runs
one, with the router's own functions over the operator's whole input: proxies from
all-MiniLM-L6-v2 (each symptom text's softmax over "symptoms of <diagnosis>" at temperature
0.05, cached by ``benchmarks.estimation`` in ``benchmarks/out/estimation``; the classification
takes the nearest diagnosis and its softmax, the infection filter the softmax mass on the
infectious diagnoses, not the row-instruction cosine the engine uses), the calibration draw,
the large tier's labels, the small tier's answers (its seeded errors above) with a simulated
confidence (AUROC about 0.8: ``0.5 + 0.5 sqrt(u)`` when right, ``0.5 + 0.5 u^2`` when wrong),
thresholds, then each row answered by the tier that decides it (drawn rows by the large
tier). Its statistics add ``cascade_shares``, measured with
`semray.cost_model.cascade_shares.measure_cascade_shares` on ``--cascade-rows`` uniformly
sampled rows of the operator's input at the target model selection would give it. The label-driven
evaluator is `benchmarks.optimizer_evaluation`.

* medical: symptoms JOIN patients -> classify diagnosis (24 labels) -> sem_filter infection ->
  filter age >= 40 and smoker -> LIMIT 20. Quality: share of output rows that are infections
  with the right diagnosis.
* medical (every row): the same without the relational filter and the LIMIT, so both semantic
  operators see all 1,200 joined rows.
* enron: extract sender, subject -> sem_filter fraud scheme -> sem_filter not quoting news.
  Quality: F1 of the kept e-mails against the 13 labelled positives, and extraction accuracy.
  The two filters' separate truths are derived (the labels give only their conjunction): a
  mail naming a scheme (Raptor, Deathstar, Chewco, Fat Boy) passes the first, and is a news
  quote unless it is a labelled positive.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso, run_benchmark
from benchmarks.harness.data import MissingData, shared_data_dir
from benchmarks.optimizer_evaluation import Proxy, Truth, Workload, compare
from benchmarks.optimizer_exhaustive import TARGETS, exhaustive_comparison, memory_scan
from semray.operators import (
    ExtractField,
    Filter,
    Join,
    Limit,
    Node,
    SemClassify,
    SemExtract,
    SemFilter,
)

NAME = "optimizer"
SCHEMES = re.compile(r"raptor|deathstar|death star|chewco|fat boy", re.IGNORECASE)
INFECTIOUS = frozenset(
    {"urinary tract infection", "impetigo", "pneumonia", "malaria", "fungal infection", "common cold", "dengue",
     "typhoid", "chicken pox"}
)  # fmt: skip


# workloads -------------------------------------------------------------------------------


def medical_workload(folder: Path, embeddings: Path | None = None, every_row: bool = False) -> Workload:
    """The medical query; ``every_row``: without the relational filter and the LIMIT, so both
    semantic operators run over all 1,200 joined rows (where a cascade has rows to save on)."""
    with (folder / "text_symptoms_data.csv").open(encoding="utf-8") as file:
        symptoms = list(csv.DictReader(file))
    with (folder / "patient_data_with_labels.csv").open(encoding="utf-8") as file:
        patients = [row for row in csv.DictReader(file) if row["text_diagnosis"] != "none"]
    diagnosis = {row["patient_id"]: row["text_diagnosis"] for row in patients}
    labels = tuple(sorted(set(diagnosis.values())))
    tables = {
        "symptoms": pa.table({"symptom_id": [int(r["symptom_id"]) for r in symptoms],
                              "symptoms": [r["symptoms"] for r in symptoms],
                              "patient_id": [int(r["patient_id"]) for r in symptoms]}),
        "patients": pa.table({"pid": [int(r["patient_id"]) for r in patients], "age": [int(r["age"]) for r in patients],
                              "smoking_history": [r["smoking_history"] for r in patients]}),
    }  # fmt: skip
    joined = Join(left=memory_scan("symptoms", tables["symptoms"]), right=memory_scan("patients", tables["patients"]),
                  on="l.patient_id = r.pid")  # fmt: skip
    classify = "Which diagnosis do these symptoms suggest: {symptoms}"
    infection = "The symptoms suggest an infection: {symptoms}"
    plan: Node = SemClassify(input=joined, instruction=classify, labels=labels, output="diagnosis")
    plan = SemFilter(input=plan, instruction=infection)
    if not every_row:
        plan = Filter(input=plan, predicate="age >= 40 AND smoking_history <> 'Never'")
        plan = Limit(input=plan, count=20)

    def truth_of(row: Mapping[str, Any]) -> str:
        return diagnosis[str(row["patient_id"])]

    def quality(rows: list[dict[str, Any]]) -> dict[str, float]:
        right = sum(truth_of(r) in INFECTIOUS and r["diagnosis"] == truth_of(r) for r in rows)
        return {"quality": right / len(rows) if rows else 0.0}

    truths: dict[str, Truth] = {classify: truth_of, infection: lambda row: truth_of(row) in INFECTIOUS}
    proxies = {} if embeddings is None else medical_proxies(folder, embeddings, labels, classify, infection)
    name = "medical (every row)" if every_row else "medical"
    return Workload(name, tables, plan, truths, "symptom_id", quality, proxies)


def medical_proxies(
    folder: Path, embeddings: Path, labels: tuple[str, ...], classify: str, infection: str
) -> dict[str, Proxy]:
    """MiniLM proxies by symptom id: the classification's nearest diagnosis and its softmax over
    the operator's labels, the infection filter's softmax mass on the infectious diagnoses."""
    from benchmarks.estimation import medical_probabilities

    rows, names, probabilities = medical_probabilities(folder, embeddings)
    columns = [names.index(label) for label in labels]
    softmax = probabilities[:, columns] / probabilities[:, columns].sum(axis=1, keepdims=True)
    by_id = {int(str(row["symptom_id"])): index for index, row in enumerate(rows)}
    infectious = np.array([label in INFECTIOUS for label in labels])

    def nearest(row: Mapping[str, Any]) -> tuple[float, Any]:
        found = softmax[by_id[int(row["symptom_id"])]]
        return float(found.max()), labels[int(found.argmax())]

    def infected(row: Mapping[str, Any]) -> tuple[float, Any]:
        return float(softmax[by_id[int(row["symptom_id"])], infectious].sum()), None

    return {classify: nearest, infection: infected}


def enron_workload(folder: Path) -> Workload:
    labels: dict[str, list[dict[str, str]]] = json.loads((folder / "labels.json").read_text(encoding="utf-8"))
    names = sorted(labels)
    texts = [(folder / "emails" / name).read_text(encoding="utf-8", errors="replace") for name in names]
    table = pa.table({"file": names, "text": texts})
    positives = {name for name, found in labels.items() if found}
    mentions = {name for name, text in zip(names, texts, strict=True) if SCHEMES.search(text)}
    by_file = dict(zip(names, texts, strict=True))
    fraud = "{text} refers to a fraudulent scheme (Raptor, Deathstar, Chewco, Fat Boy)"
    own = "{text} is not quoting a news article or an author from outside Enron"
    extract = "From the e-mail {text}"
    plan: Node = SemExtract(input=memory_scan("emails", table), instruction=extract,
                            fields=(ExtractField(name="sender"), ExtractField(name="subject")))  # fmt: skip
    plan = SemFilter(input=plan, instruction=fraud)
    plan = SemFilter(input=plan, instruction=own)

    def header(text: str, name: str) -> str | None:
        match = re.search(rf"^{name}: (.*)$", text, re.MULTILINE)
        return match.group(1).strip() if match else None

    def fields(row: Mapping[str, Any]) -> dict[str, Any]:
        found = labels.get(row["file"]) or []
        if found:
            return dict(found[0])
        return {"sender": header(by_file[row["file"]], "From"), "subject": header(by_file[row["file"]], "Subject")}

    def quality(rows: list[dict[str, Any]]) -> dict[str, float]:
        kept = {r["file"] for r in rows}
        hits = len(kept & positives)
        precision = hits / len(kept) if kept else 0.0
        recall = hits / len(positives)
        f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
        extracted = [r for r in rows if r["file"] in positives]
        right = sum(
            any(r["sender"] == e["sender"] and r["subject"] == e["subject"] for e in labels[r["file"]])
            for r in extracted
        )
        return {
            "f1": f1,
            "precision": precision,
            "recall": recall,
            "extraction_accuracy": right / len(extracted) if extracted else 0.0,
        }

    truths: dict[str, Truth] = {
        fraud: lambda row: row["file"] in positives or row["file"] in mentions,
        own: lambda row: row["file"] in positives or row["file"] not in mentions,
        extract: fields,
    }
    return Workload("enron", {"emails": table}, plan, truths, "file", quality)


# report ----------------------------------------------------------------------------------


def render_markdown(exhaustive: dict[str, Any], workloads: dict[str, Any], args: argparse.Namespace) -> str:
    greedy = exhaustive["greedy"]
    spent, took = exhaustive["selection_estimates"], exhaustive["selection_seconds"]
    worst = {k: v for k, v in exhaustive["worst"].items() if k != "tiers"}
    greedy_worst = {k: v for k, v in greedy["worst"].items() if k != "tiers"}
    lines = [
        f"**Chosen vs exhaustive** ({exhaustive['plans']} generated plans x {len(TARGETS)} quality targets, "
        f"MinCost, ladder large / cascade / small): model selection (greedy + exchanges + knapsack pass) within "
        f"10% of the exhaustive optimum in {exhaustive['within_10pct']:.1%} of cases, exactly optimal in "
        f"{exhaustive['exact']:.1%}; mean ratio {exhaustive['mean_ratio']:.4f}, worst {exhaustive['max_ratio']:.3f} "
        f"({worst}); {len(exhaustive['beyond_10pct'])} cases beyond 10%; {spent['knapsack']} selection estimates "
        f'in {took["knapsack"]:.1f} s. The greedy + exchanges alone (`search="greedy"`): within 10% in '
        f"{greedy['within_10pct']:.1%}, exactly optimal in {greedy['exact']:.1%}; mean {greedy['mean_ratio']:.4f}, "
        f"worst {greedy['max_ratio']:.3f} ({greedy_worst}); {spent['greedy']} selection estimates in "
        f"{took['greedy']:.1f} s. {exhaustive['chosen_cascades']} cascades chosen; {exhaustive['estimates']} "
        f"estimates in all (exhaustive + knapsack selection) in {exhaustive['seconds']:.0f} s.",
        "",
        "| workload | plan | rows | calls large | calls small | calls embedding | dollars | est. dollars [interval] "
        "| est. quality | quality |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for name, figures in workloads.items():
        for label in ("naive", "optimized", "optimized+cascade"):
            if label not in figures:
                continue
            f = figures[label]
            quality = ", ".join(f"{k} {v:.2f}" for k, v in f.items() if k in ("quality", "f1", "extraction_accuracy"))
            est = f["estimated_dollars"]
            calls = f["calls"]
            lines.append(
                f"| {name} | {label} | {f['rows']} | {calls.get('large', 0)} | {calls.get('small', 0)} | "
                f"{calls.get('embedding', 0)} | ${f['dollars']:.4f} | ${est[0]:.4f} [${est[1]:.4f}, ${est[2]:.4f}] | "
                f"{f['estimated_quality']:.3f} | {quality} |"
            )
    lines.append("")
    for name, figures in workloads.items():
        for label, tiers in figures["tiers"].items():
            lines.append(f"- {name} {label}: " + "; ".join(f"`{node}` on {tier}" for node, tier in tiers.items()))
        for label in ("optimized+cascade",):
            for node, split in figures.get(label, {}).get("cascades", {}).items():
                lines.append(
                    f"  - `{node}`: estimated embedding share {split['embedding_share']:.2f}, small share "
                    f"{split['small_share']:.2f}, large-tier rows {split['large_rows']:.0f}"
                )
    return "\n".join(lines)


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    started, load_before = now_iso(), load_average()
    exhaustive = exhaustive_comparison(args.plans, args.seed)
    workloads: dict[str, Any] = {}
    data = shared_data_dir()
    missing = [name for name in ("medical", "enron") if not (data / name).exists()]
    if missing and not args.skip_if_missing:
        raise MissingData(f"benchmark data not found: {', '.join(str(data / m) for m in missing)}")
    if not (data / "medical").exists() and not (data / "enron").exists():
        print("benchmarks.optimizer: ../shared/data missing; only the exhaustive comparison ran", file=sys.stderr)
    embeddings = Path(args.out_dir).parent / "estimation"
    builds: dict[str, Callable[[Path], Workload]] = {
        "medical": lambda folder: medical_workload(folder, embeddings),
        "medical (every row)": lambda folder: medical_workload(folder, embeddings, every_row=True),
        "enron": enron_workload,
    }
    for name, build in builds.items():
        folder = data / name.split(" ")[0]
        if folder.exists():
            workloads[name] = compare(build(folder), args.sample_rows, args.cascade_rows, args.seed)
    return BenchmarkResult(
        name=NAME,
        title="Optimizer: model selection vs exhaustive, optimized vs naive plans",
        command=command,
        parameters={
            "plans": args.plans,
            "seed": args.seed,
            "sample_rows": args.sample_rows,
            "cascade_rows": args.cascade_rows,
            "targets": list(TARGETS),
        },
        figures={"exhaustive": exhaustive, "workloads": workloads},
        markdown=render_markdown(exhaustive, workloads, args),
        started_at=started,
        load_before=load_before,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser(NAME, "optimizer: chosen vs exhaustive tiers, optimized vs naive plans")
    parser.add_argument("--plans", type=int, default=60, help="generated plans for the exhaustive comparison")
    parser.add_argument("--sample-rows", type=int, default=60, help="labelled rows per semantic operator's statistics")
    parser.add_argument(
        "--cascade-rows", type=int, default=600, help="labelled rows per operator that may cascade (its shares)"
    )
    parser.add_argument("--seed", type=int, default=7)
    return run_benchmark(NAME, parser, body, argv)


if __name__ == "__main__":
    sys.exit(main())
