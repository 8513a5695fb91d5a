"""Model selection against exhaustive enumeration on generated plans (part of `benchmarks.optimizer`).

``--plans`` generated chains of 2-6 semantic operators (filters, maps, classifications) over a
10,000-row source, each with random measured statistics (selectivities, prompt tokens per row,
the small tier's quality per operator, and the shares of rows a cascade's embedding and small
stages decide). For quality targets 0.80-0.95 under ``MinCost``, each search's estimated
dollars (the default knapsack pass and the plain greedy) are compared with the best of every
tier assignment over the ladder large / cascade / small.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from typing import Any

import pyarrow as pa

from semray.cost_model.estimates import Interval, PlanEstimate
from semray.cost_model.policies import MinCost
from semray.cost_model.prices import TierProfile
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Node, Scan, Schema, SemClassify, SemFilter, SemMap, SourceSpec, walk
from semray.operators.keys import source_key, statistics_key
from semray.operators.plan_paths import operator_paths
from semray.planner.cost_estimator import cost_model_estimator
from semray.planner.model_selection import (
    CASCADE,
    LADDER,
    allocate_cascade_targets,
    choosable_paths,
    rungs_of,
    select_models,
    with_targets,
)

PROFILES = {
    "large": TierProfile("large", 2.5, 10.0, 0.0, math.inf, 8),
    "small": TierProfile("small", 0.15, 0.6, 0.0, math.inf, 8),
    "embedding": TierProfile("embedding", 0.0, 0.0, 0.0, math.inf, 8),
}
WITHOUT_CASCADE = tuple(rung for rung in LADDER if rung != CASCADE)
TARGETS = (0.80, 0.85, 0.90, 0.95)


def memory_scan(name: str, table: pa.Table) -> Scan:
    return Scan(source=SourceSpec(kind="memory", options={"name": name}), source_schema=Schema.from_arrow(table.schema))


def exhaustive_comparison(plans: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    scan = memory_scan("docs", pa.table({"text": ["x"]}))
    ratios: list[float] = []
    greedy_ratios: list[float] = []
    worst: dict[str, Any] = {}
    greedy_worst: dict[str, Any] = {}
    beyond: list[dict[str, Any]] = []
    greedy_beyond: list[dict[str, Any]] = []
    estimates = 0
    selection_estimates = {"knapsack": 0, "greedy": 0}
    selection_seconds = {"knapsack": 0.0, "greedy": 0.0}
    cascades = 0
    started = time.perf_counter()
    for index in range(plans):
        node, statistics = generated_plan(rng, index, scan)
        estimator = cost_model_estimator(statistics, PROFILES)
        paths = choosable_paths(node)
        nodes = operator_paths(node)
        everything: dict[
            tuple[str, ...], PlanEstimate
        ] = {}  # assignments without a cascade: one estimate for every target
        for target in TARGETS:
            policy = MinCost(quality=target)
            goals = allocate_cascade_targets(node, estimator(node, None), policy)
            ladders = [rungs_of(nodes[path]) if path in goals else WITHOUT_CASCADE for path in paths]
            best = math.inf
            estimate: PlanEstimate
            for combo in itertools.product(*ladders):
                tiers = dict(zip(paths, combo, strict=True))
                if CASCADE in combo:
                    estimate = estimator(with_targets(node, tiers, goals), tiers)
                    estimates += 1
                else:
                    if combo not in everything:
                        everything[combo] = estimator(node, tiers)
                        estimates += 1
                    estimate = everything[combo]
                if estimate.quality >= target:  # MinCost's feasibility
                    best = min(best, estimate.dollars.value)
            for search in ("greedy", "knapsack"):
                clock = time.perf_counter()
                chosen = select_models(node, estimator, policy, search=search)
                selection_seconds[search] += time.perf_counter() - clock
                selection_estimates[search] += chosen.estimated
                ratio = chosen.estimate.dollars.value / best if best > 0 else 1.0
                case = {"ratio": ratio, "plan": index, "operators": len(paths), "target": target,
                        "tiers": dict(chosen.tiers)}  # fmt: skip
                if search == "greedy":
                    greedy_beyond += [case] if ratio > 1.10 + 1e-9 else []
                    greedy_ratios.append(ratio)
                    greedy_worst = case if not greedy_worst or ratio > greedy_worst["ratio"] else greedy_worst
                    continue
                estimates += chosen.estimated
                cascades += sum(tier == CASCADE for tier in chosen.tiers.values())
                ratios.append(ratio)
                worst = case if not worst or ratio > worst["ratio"] else worst
                if ratio > 1.10 + 1e-9:
                    beyond.append(case)
    return {
        "plans": plans,
        "cases": len(ratios),
        **_ratio_figures(ratios),
        "worst": worst,
        "beyond_10pct": beyond,
        "greedy": {**_ratio_figures(greedy_ratios), "worst": greedy_worst, "beyond_10pct": greedy_beyond},
        "selection_estimates": selection_estimates,
        "selection_seconds": selection_seconds,
        "chosen_cascades": cascades,
        "estimates": estimates,
        "seconds": time.perf_counter() - started,
    }


def _ratio_figures(ratios: list[float]) -> dict[str, float]:
    """Share within 10% of the optimum, share exactly optimal, mean and worst ratio."""
    return {
        "within_10pct": sum(r <= 1.10 + 1e-9 for r in ratios) / len(ratios),
        "exact": sum(r <= 1 + 1e-9 for r in ratios) / len(ratios),
        "mean_ratio": sum(ratios) / len(ratios),
        "max_ratio": max(ratios),
    }


def generated_plan(rng: random.Random, index: int, scan: Scan) -> tuple[Node, PlanStatistics]:
    """Plan ``index`` of the exhaustive comparison: 2-6 semantic filters, maps and classifications
    over ``scan`` and random statistics for them (drawn from ``rng``, which it advances)."""
    node: Node = scan
    for position in range(rng.randint(2, 6)):
        kind = rng.choice(("filter", "filter", "map", "classify"))
        instruction = f"{{text}} property {index}-{position}"
        if kind == "filter":
            node = SemFilter(input=node, instruction=instruction)
        elif kind == "map":
            node = SemMap(input=node, instruction=instruction, output=f"m{position}")
        else:
            node = SemClassify(input=node, instruction=instruction, labels=("a", "b", "c"), output=f"c{position}")
    semantic = [n for n in walk(node) if n.calls_llm]
    statistics = PlanStatistics(
        source_rows={source_key(scan): Interval.exact(10_000)},
        selectivity={statistics_key(n): _around(rng.uniform(0.05, 0.95)) for n in semantic},
        tokens_per_row={statistics_key(n): Interval.exact(rng.uniform(50, 800)) for n in semantic},
        tier_quality={(statistics_key(n), "small"): rng.uniform(0.9, 0.995) for n in semantic},
        cascade_shares={statistics_key(n): _random_shares(rng) for n in semantic},
    )
    return node, statistics


def _random_shares(rng: random.Random) -> tuple[Interval, Interval]:
    """Shares a cascade's embedding and small stages decide: anything from useless to most rows."""
    embedding = rng.uniform(0.0, 0.5)
    small = rng.uniform(0.0, 1.0 - embedding)
    return _around(embedding), _around(small)


def _around(value: float) -> Interval:
    return Interval(value, max(0.0, value - 0.05), min(1.0, value + 0.05))
