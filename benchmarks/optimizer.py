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

**Optimized vs naive.** Two multi-operator queries over ``../shared/data``, each run twice by
a label-driven evaluator (no Ray, no model): the written plan with every semantic operator on
the large tier, and ``optimize(plan, statistics, profiles, MinCost(0.9))``. Answers come from
the labels; the small tier errs on a seeded 4% of rows per filter and 10% per classification
or extraction (the large tier is the labels). Statistics are what a 60-row uniform labelled
sample says (selectivity with a Wilson interval, mean prompt tokens) plus the configured
small-tier quality. Tokens are ``len(prompt) / 4``; prices: large $2.50 / $10 per M tokens
in / out, small $0.15 / $0.60, embedding free (MiniLM on the CPU).

Medical is optimized twice: without the cascade rung (tiers large / small, as before cascades
could be priced) and with it. A cascade is evaluated the way `semray.pipeline.cascade` runs
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
sampled rows of the operator's input at the target model selection would give it.

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
import hashlib
import itertools
import json
import math
import random
import re
import string
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso, run_benchmark
from benchmarks.harness.data import MissingData, shared_data_dir
from semray.cost_model.cascade_cost import CascadeEstimate, cascade_kind
from semray.cost_model.cascade_shares import measure_cascade_shares
from semray.cost_model.estimates import Interval
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.policies import MinCost
from semray.cost_model.prices import TierProfile
from semray.cost_model.statistics import PlanStatistics, source_key, statistics_key
from semray.operators import (
    ExtractField,
    Filter,
    Join,
    Limit,
    Node,
    Project,
    Scan,
    Schema,
    SemClassify,
    SemExtract,
    SemFilter,
    SemMap,
    SourceSpec,
    walk,
)
from semray.planner import optimize_plan
from semray.planner.costing import PlanEstimateLike, cost_model_estimator
from semray.planner.model_selection import (
    CASCADE,
    LADDER,
    allocate_cascade_targets,
    choosable_paths,
    rungs_of,
    select_models,
    with_targets,
)
from semray.planner.paths import operator_paths
from semray.serving import router

NAME = "optimizer"
PROFILES = {
    "large": TierProfile("large", 2.5, 10.0, 0.0, math.inf, 8),
    "small": TierProfile("small", 0.15, 0.6, 0.0, math.inf, 8),
    "embedding": TierProfile("embedding", 0.0, 0.0, 0.0, math.inf, 8),
}
WITHOUT_CASCADE = tuple(rung for rung in LADDER if rung != CASCADE)
POLICY = MinCost(quality=0.9)
SMALL_ERROR = {"sem_filter": 0.04, "sem_classify": 0.10, "sem_extract": 0.10}
TARGETS = (0.80, 0.85, 0.90, 0.95)
SCHEMES = re.compile(r"raptor|deathstar|death star|chewco|fat boy", re.IGNORECASE)
INFECTIOUS = frozenset(
    {"urinary tract infection", "impetigo", "pneumonia", "malaria", "fungal infection", "common cold", "dengue",
     "typhoid", "chicken pox"}
)  # fmt: skip


def memory_scan(name: str, table: pa.Table) -> Scan:
    return Scan(source=SourceSpec(kind="memory", options={"name": name}), source_schema=Schema.from_arrow(table.schema))


# chosen vs exhaustive -------------------------------------------------------------------


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
            tuple[str, ...], PlanEstimateLike
        ] = {}  # assignments without a cascade: one estimate for every target
        for target in TARGETS:
            policy = MinCost(quality=target)
            goals = allocate_cascade_targets(node, estimator(node, None), policy)
            ladders = [rungs_of(nodes[path]) if path in goals else WITHOUT_CASCADE for path in paths]
            best = math.inf
            estimate: PlanEstimateLike
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
                chosen = select_models(node, estimator, policy, search=search)  # type: ignore[arg-type]
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


# label-driven evaluation ------------------------------------------------------------------


@dataclass
class Tally:
    """Calls, tokens and dollars per tier of one evaluation."""

    calls: Counter[str] = field(default_factory=Counter)
    input_tokens: Counter[str] = field(default_factory=Counter)
    output_tokens: Counter[str] = field(default_factory=Counter)

    @property
    def dollars(self) -> float:
        return sum(PROFILES[t].dollars(self.input_tokens[t], self.output_tokens[t]) for t in self.calls)


Truth = Callable[[Mapping[str, Any]], Any]
Proxy = Callable[[Mapping[str, Any]], tuple[float, Any]]
"""A row's embedding proxy: (score, the proxy's own answer: a filter's None, a classification's nearest label)."""


@dataclass(frozen=True)
class Workload:
    name: str
    tables: dict[str, pa.Table]
    plan: Node
    truths: dict[str, Truth]  # instruction -> truth of a row (a field -> value dict for extractions)
    key: str
    quality: Callable[[list[dict[str, Any]]], dict[str, float]]
    proxies: dict[str, Proxy] = field(default_factory=dict)  # instruction -> proxy (operators that may cascade)


def render(template: str, row: Mapping[str, Any]) -> str:
    return "".join(
        literal + ("" if name is None else str(row[name])) for literal, name, _, _ in string.Formatter().parse(template)
    )


def wrong(node: Node, row: Mapping[str, Any], key: str, tier: str) -> bool:
    if tier == "large":
        return False
    seed = hashlib.blake2b(f"{node.op}|{getattr(node, 'instruction', '')}|{row[key]}".encode(), digest_size=8)
    return int.from_bytes(seed.digest(), "big") % 10_000 < SMALL_ERROR[node.op] * 10_000


def evaluate(node: Node, work: Workload, tally: Tally) -> list[dict[str, Any]]:
    inputs = [evaluate(child, work, tally) for child in node.children]
    if isinstance(node, Scan):
        names = [c.name for c in node.output_schema.user_columns()]
        return [{n: row[n] for n in names} for row in work.tables[str(node.source.options["name"])].to_pylist()]
    if isinstance(node, Filter):
        return [row for row, keep in zip(inputs[0], _mask(node.predicate, inputs[0], node.input), strict=True) if keep]
    if isinstance(node, Project):
        return [{item.name: row[item.expr.strip('"')] for item in node.exprs} for row in inputs[0]]
    if isinstance(node, Limit):
        return inputs[0][node.offset : node.offset + node.count]
    if isinstance(node, Join):
        left_key, right_key = node.keys[0][0]
        index: dict[Any, list[dict[str, Any]]] = {}
        for row in inputs[1]:
            index.setdefault(row[right_key], []).append(row)
        names = node.right_names
        return [
            {**left, **{names[k]: v for k, v in right.items()}}
            for left in inputs[0]
            for right in index.get(left[left_key], [])
        ]
    if isinstance(node, SemFilter | SemClassify | SemExtract):
        return _semantic(node, inputs[0], work, tally)
    raise NotImplementedError(f"the benchmark evaluator has no rule for {type(node).__name__}")


def _mask(predicate: str, rows: list[dict[str, Any]], source: Node) -> list[bool]:
    if not rows:
        return []
    schema = source.output_schema
    names = [c.name for c in schema.user_columns()]
    table = pa.Table.from_pylist([{n: row[n] for n in names} for row in rows])
    connection = duckdb.connect()
    connection.register("t", table)
    return [bool(value) for (value,) in connection.sql(f"SELECT coalesce(({predicate}), false) FROM t").fetchall()]


def _semantic(node: Any, rows: list[dict[str, Any]], work: Workload, tally: Tally) -> list[dict[str, Any]]:
    if node.cascade_target() is not None:
        return _cascade(node, rows, work, tally)
    tier = "large" if node.tier == "auto" else node.tier
    return [out for row in rows if (out := _answered(node, row, _answer(node, row, work, tier), tally, tier))]


def _answer(node: Any, row: Mapping[str, Any], work: Workload, tier: str) -> Any:
    """The tier's answer for a row: the label, wrong on the tier's seeded error rows."""
    answer = work.truths[node.instruction](row)
    if not wrong(node, row, work.key, tier):
        return answer
    if isinstance(node, SemFilter):
        return not answer  # a wrong answer flips the decision
    if isinstance(node, SemClassify):
        return node.labels[(node.labels.index(answer) + 1) % len(node.labels)]
    return None


def _answered(node: Any, row: dict[str, Any], answer: Any, tally: Tally, tier: str) -> dict[str, Any] | None:
    """Count one call on ``tier`` and give the output row (None: a filter dropped it)."""
    _count(node, row, tally, tier)
    return _output(node, row, answer)


def _count(node: Any, row: Mapping[str, Any], tally: Tally, tier: str) -> None:
    tally.calls[tier] += 1
    tally.input_tokens[tier] += len(render(node.instruction, row)) // 4 + 40
    if isinstance(node, SemFilter):
        tally.output_tokens[tier] += 1
    elif isinstance(node, SemClassify):
        tally.output_tokens[tier] += 3
    else:
        tally.output_tokens[tier] += 12 * len(node.fields)


def _output(node: Any, row: dict[str, Any], answer: Any) -> dict[str, Any] | None:
    if isinstance(node, SemFilter):
        return row if answer else None
    if isinstance(node, SemClassify):
        return {**row, node.output: answer}
    return {**row, **{f.name: (None if answer is None else answer.get(f.name)) for f in node.fields}}


def small_confidence(node: Node, row: Mapping[str, Any], key: str, right: bool) -> float:
    """The small tier's simulated confidence: higher when it is right (AUROC about 0.8)."""
    seed = hashlib.blake2b(
        f"confidence|{node.op}|{getattr(node, 'instruction', '')}|{row[key]}".encode(), digest_size=8
    )
    u = int.from_bytes(seed.digest(), "big") / 2**64
    return 0.5 + 0.5 * (math.sqrt(u) if right else u * u)


def cascade_inputs(node: Any, rows: Sequence[Mapping[str, Any]], work: Workload) -> dict[str, Any]:
    """Per row: the proxy score and answer, the large tier's answer (the label), the small tier's
    answer and confidence: what the router sees."""
    proxies = [work.proxies[node.instruction](row) for row in rows]
    large = [work.truths[node.instruction](row) for row in rows]
    small = [_answer(node, row, work, "small") for row in rows]
    return {
        "proxy": np.array([score for score, _ in proxies], dtype=np.float64),
        "proxy_answers": [answer for _, answer in proxies],
        "large_answers": large,
        "small_answers": small,
        "small_confidence": np.array(
            [small_confidence(node, row, work.key, a == b) for row, a, b in zip(rows, small, large, strict=True)]
        ),
    }


def _cascade(node: Any, rows: list[dict[str, Any]], work: Workload, tally: Tally) -> list[dict[str, Any]]:
    """Run the router over the whole input, as `semray.pipeline.cascade` does, and answer each row
    with the tier that decides it (drawn rows with the large tier's label)."""
    if not rows:
        return []
    kind = cascade_kind(node)
    goal = node.cascade_target()
    target = router.Target(kind, goal.metric, goal.level, goal.delta, goal.labels)  # type: ignore[arg-type]
    seen = cascade_inputs(node, rows, work)
    proxy, confidence = seen["proxy"], seen["small_confidence"]
    large_yes = np.array([float(bool(a)) for a in seen["large_answers"]])
    proxy_right = np.array([float(a == b) for a, b in zip(seen["proxy_answers"], seen["large_answers"], strict=True)])
    small_right = np.array([float(a == b) for a, b in zip(seen["small_answers"], seen["large_answers"], strict=True)])
    design = router.draw_calibration(
        target, proxy, seed=int(hashlib.sha256(node.instruction.encode()).hexdigest()[:8], 16)
    )
    route = router.route_embedding(target, proxy, design, large_yes[design.draws], proxy_right[design.draws])
    route = router.route_small(route, proxy, confidence, design, small_right[design.draws])
    deciding = route.tiers(proxy, confidence)
    deciding[design.rows_to_label] = router.LARGE
    asked_small = ~route.embedding_decides(proxy) if route.uses_small else np.zeros(len(rows), dtype=bool)
    out = []
    for index, row in enumerate(rows):
        tally.calls["embedding"] += 1
        tally.input_tokens["embedding"] += len(render(node.instruction, row)) // 4
        if asked_small[index]:
            _count(node, row, tally, "small")
        if deciding[index] == router.LARGE:
            _count(node, row, tally, "large")
            answered = _output(node, row, seen["large_answers"][index])
        elif deciding[index] == router.SMALL:
            answered = _output(node, row, seen["small_answers"][index])
        elif isinstance(node, SemFilter):
            answered = _output(node, row, bool(route.embedding_answer(proxy[index : index + 1])[0]))
        else:
            answered = _output(node, row, seen["proxy_answers"][index])
        if answered is not None:
            out.append(answered)
    return out


def measured_statistics(work: Workload, sample_rows: int, seed: int) -> PlanStatistics:
    """What a uniform labelled sample of each semantic operator's input says."""
    rng = random.Random(seed)
    selectivity: dict[str, Interval] = {}
    tokens: dict[str, Interval] = {}
    quality: dict[tuple[str, str], float] = {}
    for node in walk(work.plan):
        if not node.calls_llm:
            continue
        rows = evaluate(node.children[0], work, Tally())
        sample = rng.sample(rows, min(sample_rows, len(rows)))
        key = statistics_key(node)
        tokens[key] = Interval.exact(sum(len(render(node.instruction, r)) // 4 + 40 for r in sample) / len(sample))
        quality[(key, "small")] = 1.0 - SMALL_ERROR[node.op]
        if isinstance(node, SemFilter):
            kept = sum(bool(work.truths[node.instruction](r)) for r in sample)
            selectivity[key] = _wilson(kept, len(sample))
    sources = {source_key(n): Interval.exact(work.tables[str(n.source.options["name"])].num_rows)
               for n in walk(work.plan) if isinstance(n, Scan)}  # fmt: skip
    return PlanStatistics(source_rows=sources, selectivity=selectivity, tokens_per_row=tokens, tier_quality=quality)


def _wilson(successes: int, n: int, z: float = 1.96) -> Interval:
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half))


def cascade_statistics(work: Workload, statistics: PlanStatistics, rows: int, seed: int) -> PlanStatistics:
    """``statistics`` plus the cascade shares of every operator that may cascade, measured by the
    router's route choice on ``rows`` uniformly sampled rows of its input, at the target model
    selection would give it."""
    rng = random.Random(seed)
    nodes = operator_paths(work.plan)
    goals = allocate_cascade_targets(work.plan, estimate_plan(work.plan, statistics, PROFILES), POLICY)
    shares: dict[str, tuple[Interval, Interval]] = {}
    for path, goal in goals.items():
        node: Any = nodes[path]
        kind = cascade_kind(node)
        if node.instruction not in work.proxies or kind is None:
            continue
        inputs = evaluate(node.children[0], work, Tally())
        seen = cascade_inputs(node, rng.sample(inputs, min(rows, len(inputs))), work)
        shares[statistics_key(node)] = measure_cascade_shares(
            goal,
            kind,
            seen["proxy"],
            seen["large_answers"],
            seen["small_answers"],
            seen["small_confidence"],
            seen["proxy_answers"],
        )
    return statistics.merged(PlanStatistics(cascade_shares=shares))


def compare(work: Workload, sample_rows: int, cascade_rows: int, seed: int) -> dict[str, Any]:
    statistics = measured_statistics(work, sample_rows, seed)
    ladders = {"optimized": WITHOUT_CASCADE}
    if work.proxies:
        statistics = cascade_statistics(work, statistics, cascade_rows, seed)
        ladders["optimized+cascade"] = LADDER
    figures: dict[str, Any] = {"tiers": {}, "optimize_seconds": {}}
    plans: list[tuple[str, Node]] = [("naive", work.plan)]
    for label, ladder in ladders.items():
        started = time.perf_counter()
        optimization = optimize_plan(work.plan, statistics, PROFILES, POLICY, ladder=ladder)
        figures["optimize_seconds"][label] = time.perf_counter() - started
        figures["tiers"][label] = {n.label(): getattr(n, "tier", "") for n in walk(optimization.plan) if n.calls_llm}
        plans.append((label, optimization.plan))
    for label, plan in plans:
        tally = Tally()
        rows = evaluate(plan, work, tally)
        estimate = estimate_plan(plan, statistics, PROFILES)
        figures[label] = {
            "rows": len(rows),
            "calls": dict(tally.calls),
            "dollars": tally.dollars,
            "estimated_dollars": [estimate.dollars.value, estimate.dollars.low, estimate.dollars.high],
            "estimated_quality": estimate.quality,
            "cascades": {
                op.label: {
                    "embedding_share": op.cascade.embedding_share.value,
                    "small_share": op.cascade.small_share.value,
                    "large_rows": op.cascade.large_rows.value,
                }
                for op in estimate.operators
                if isinstance(op, CascadeEstimate) and op.cascade is not None
            },
            **work.quality(rows),
        }
    figures["cascade_shares"] = {
        key: [[share.value, share.low, share.high] for share in found]
        for key, found in statistics.cascade_shares.items()
    }
    return figures


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
