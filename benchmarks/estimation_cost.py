"""Estimated vs actual cost of whole workloads (part of ``python -m benchmarks.estimation``).

The medical workload runs through the simulated tiers in process (``ModelTier`` over the
simulator, no Ray) so the actual dollars are what the tiers bill; the generated workload prices
a 100k-row filter. Each is estimated by ``estimate_plan`` from ``measure_statistics`` over
importance draws, for several seeds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from benchmarks.workloads.definitions import INFECTIONS
from semray.cost_model.estimates import Interval
from semray.cost_model.measure import measure_statistics, passes
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.prices import profiles_from_serving
from semray.cost_model.statistics import PlanStatistics
from semray.cost_model.tokens import PromptTokens
from semray.operators import Node, Scan, Schema, SemClassify, SemFilter, SemMap, SourceSpec
from semray.operators.keys import source_key

Row = Mapping[str, Any]


# -- cost: medical through the simulated tiers ----------------------------------------------------

MEDICAL_SCHEMA = Schema.of(("symptoms", "VARCHAR"), ("patient_id", "BIGINT"), ("symptom_id", "BIGINT"))
INFECTION = "The symptoms {symptoms} suggest an infection"
DIAGNOSIS = "The diagnosis for {symptoms}"


def medical_simulator(folder: Path) -> Any:
    from semray.serving.simulator import SimulatorConfig

    return SimulatorConfig.from_mapping(
        {
            "seed": 1,
            "datasets": {
                "symptoms": {
                    "path": str(folder / "text_symptoms_data.csv"),
                    "key_column": "symptom_id",
                    "text_columns": ["symptoms"],
                    "labels_path": str(folder / "patient_data_with_labels.csv"),
                    "join_column": "patient_id",
                }
            },
            "tasks": [
                {
                    "name": "infection",
                    "kind": "filter",
                    "label_column": "text_diagnosis",
                    "keywords": ["suggest an infection"],
                    "true_values": sorted(INFECTIONS),
                },
                {"name": "diagnosis", "kind": "label", "label_column": "text_diagnosis", "keywords": ["diagnosis"]},
            ],
        }
    )


class TierLabeller:
    """A simulated tier as a labeller: renders each row's prompt as the pipeline does, one batch per call."""

    def __init__(self, tier: Any) -> None:
        self.tier = tier
        self.dollars = 0.0
        self.calls = 0

    def __call__(self, node: Node, rows: Sequence[Row]) -> list[object]:
        from semray.serving.prompts import render_prompt
        from semray.serving.prompts.operators import build_request

        kind: Literal["filter", "classify"] = "filter" if isinstance(node, SemFilter) else "classify"
        choices = node.labels if isinstance(node, SemClassify) else ()
        instruction = getattr(node, "instruction", "")
        requests = [
            build_request(kind, render_prompt(instruction, row).text, request_id=str(row["_rowid"]), choices=choices)
            for row in rows
        ]
        responses = asyncio.run(self.tier.generate(requests)) if requests else []
        self.dollars += sum(response.usage.dollars for response in responses)
        self.calls += len(responses)
        return [response.value for response in responses]


def medical_cost(
    folder: Path, rows: list[Row], names: list[str], probabilities: npt.NDArray[np.float64], labels: int, seeds: int
) -> dict[str, Any]:
    """Estimated vs actual dollars of the medical workload; ``probabilities`` are the texts' similarity
    softmax over the diagnosis ``names`` (`benchmarks.estimation.medical_probabilities`)."""
    from semray.serving.backends.simulated import SimulatedBackend
    from semray.serving.config import ServingConfig, TierConfig
    from semray.serving.simulator import Simulator
    from semray.serving.tier import ModelTier

    infection_proxy = probabilities[:, [name in INFECTIONS for name in names]].sum(axis=1)
    config = medical_simulator(folder)
    simulator = Simulator(config)
    tiers = {}
    for name in ("small", "large"):
        tier_config = TierConfig(backend="simulated", model=f"sim-{name}")
        tiers[name] = ModelTier(name, tier_config, SimulatedBackend(tier_config, simulator))
    scan = Scan(
        source=SourceSpec(kind="csv", path=str(folder / "text_symptoms_data.csv")), source_schema=MEDICAL_SCHEMA
    )
    infection = SemFilter(input=scan, instruction=INFECTION, tier="small")
    diagnosis = SemClassify(input=infection, instruction=DIAGNOSIS, labels=tuple(names), tier="large")
    profiles = profiles_from_serving(ServingConfig(simulator=config))

    started = time.perf_counter()
    run_small, run_large = TierLabeller(tiers["small"]), TierLabeller(tiers["large"])
    kept = [row for row, answer in zip(rows, run_small(infection, rows), strict=True) if passes(answer)]
    run_large(diagnosis, kept)
    actual = run_small.dollars + run_large.dollars
    run_seconds = time.perf_counter() - started

    index = {row["_rowid"]: i for i, row in enumerate(rows)}

    def proxy(node: Node, batch: Sequence[Row]) -> npt.NDArray[np.float64]:
        return np.array([infection_proxy[index[row["_rowid"]]] for row in batch])

    trials = []
    for seed in range(seeds):
        top, small = TierLabeller(tiers["large"]), TierLabeller(tiers["small"])
        measured = measure_statistics(
            (infection, diagnosis),
            rows,
            proxy,
            top,
            budget=labels,
            seed=seed,
            tier_labellers={"small": small},
            token_rows=300,
        )
        statistics = measured.statistics().merged(
            PlanStatistics(source_rows={source_key(scan): Interval.exact(len(rows))})
        )
        estimate = estimate_plan(diagnosis, statistics, profiles)
        trials.append(_trial(seed, estimate, top.dollars + small.dollars, top.calls))
    return _cost_summary("medical (1,200 rows, simulated tiers)", actual, len(kept), trials, run_seconds)


# -- cost: generated, counted with the simulator's tokenizer and prices ----------------------------

WORDS = [
    "battery",
    "screen",
    "camera",
    "kettle",
    "delivery",
    "box",
    "price",
    "support",
    "refund",
    "cable",
    "charger",
    "speaker",
    "sound",
    "light",
    "colour",
    "size",
    "fit",
    "quality",
    "warranty",
    "manual",
    "button",
    "strap",
    "lid",
    "handle",
    "motor",
    "noise",
    "smell",
]
GENERATED_SCHEMA = Schema.of(("review", "VARCHAR"))


def generated_rows(size: int, seed: int = 11) -> tuple[list[Row], npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Texts of 8-60 words (length independent of the label), a calibrated proxy, and the labels."""
    rng = np.random.default_rng(seed)
    scores = rng.beta(0.5, 2.0, size)
    truth = rng.random(size) < scores
    lengths = rng.integers(8, 61, size)
    words = rng.integers(0, len(WORDS), int(lengths.sum()))
    rows: list[Row] = []
    start = 0
    for i, length in enumerate(lengths):
        rows.append({"_rowid": str(i), "review": " ".join(WORDS[w] for w in words[start : start + length])})
        start += length
    return rows, scores, truth


def generated_cost(size: int, labels: int, seeds: int) -> dict[str, Any]:
    from semray.serving.config import ServingConfig

    rows, scores, truth = generated_rows(size)
    scan = Scan(source=SourceSpec(kind="csv", path="generated.csv"), source_schema=GENERATED_SCHEMA)
    useful = SemFilter(input=scan, instruction="{review} is a useful review", tier="small")
    rating = SemMap(
        input=useful, instruction="How helpful is {review}", output="stars", output_type="int", lo=1, hi=5, tier="large"
    )
    profiles = profiles_from_serving(ServingConfig())
    counter = PromptTokens()

    started = time.perf_counter()
    small, large = profiles["small"], profiles["large"]
    filter_tokens = sum(counter.count(useful, row) for row in rows)
    rating_tokens = sum(counter.count(rating, row) for row, kept in zip(rows, truth, strict=True) if kept)
    kept_rows = int(truth.sum())
    actual = small.dollars(filter_tokens, len(rows)) + large.dollars(
        rating_tokens, kept_rows
    )  # 1 completion token each
    run_seconds = time.perf_counter() - started

    index = {row["_rowid"]: i for i, row in enumerate(rows)}

    def labeller(node: Node, batch: Sequence[Row]) -> list[object]:
        if isinstance(node, SemFilter):
            return [bool(truth[index[row["_rowid"]]]) for row in batch]
        return [3 for _ in batch]

    def proxy(node: Node, batch: Sequence[Row]) -> npt.NDArray[np.float64]:
        return np.array([scores[index[row["_rowid"]]] for row in batch])

    trials = []
    for seed in range(seeds):
        measured = measure_statistics((useful, rating), rows, proxy, labeller, budget=labels, seed=seed, token_rows=500)
        statistics = measured.statistics().merged(
            PlanStatistics(
                source_rows={source_key(scan): Interval.exact(len(rows))}, default_tier_quality={"small": 0.85}
            )
        )
        estimate = estimate_plan(rating, statistics, profiles)
        trials.append(_trial(seed, estimate, 0.0, len(measured.operators[0].labels)))
    return _cost_summary(
        f"generated ({size:,} rows, simulator tokens and prices)", actual, kept_rows, trials, run_seconds
    )


def _trial(seed: int, estimate: Any, labels_dollars: float, labelled_rows: int) -> dict[str, Any]:
    """One seed's estimate of a whole run (its plan's dollars with interval, the filter's kept rows)."""
    return {
        "seed": seed,
        "estimated_dollars": estimate.dollars.value,
        "low": estimate.dollars.low,
        "high": estimate.dollars.high,
        "estimated_kept": estimate.operator("input").rows_out.value,
        "quality_bound": estimate.quality,
        "labels_bought_dollars": labels_dollars,
        "labelled_rows": labelled_rows,
    }


def _cost_summary(
    name: str, actual: float, kept: int, trials: list[dict[str, Any]], run_seconds: float
) -> dict[str, Any]:
    errors = [abs(t["estimated_dollars"] - actual) / actual for t in trials]
    return {
        "workload": name,
        "actual_dollars": actual,
        "actual_kept": kept,
        "actual_seconds": run_seconds,
        "trials": trials,
        "mean_abs_relative_error": float(np.mean(errors)),
        "max_abs_relative_error": float(np.max(errors)),
        "covered": int(sum(t["low"] <= actual <= t["high"] for t in trials)),
    }
