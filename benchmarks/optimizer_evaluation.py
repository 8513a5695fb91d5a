"""The label-driven evaluator of `benchmarks.optimizer`: runs a plan over in-memory tables with
answers from labels (no Ray, no model), counting calls and tokens per tier, evaluates cascades
with the router's own functions, and measures the statistics the optimizer plans with.
"""

from __future__ import annotations

import hashlib
import math
import random
import string
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from benchmarks.optimizer_exhaustive import PROFILES, WITHOUT_CASCADE
from semray.cost_model import cascade_routes as router
from semray.cost_model.cascade_cost import CascadeEstimate, cascade_kind
from semray.cost_model.cascade_shares import measure_cascade_shares
from semray.cost_model.estimates import Interval
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.policies import MinCost
from semray.cost_model.statistics import PlanStatistics
from semray.operators import (
    Filter,
    Join,
    Limit,
    Node,
    Project,
    Scan,
    SemClassify,
    SemExtract,
    SemFilter,
    walk,
)
from semray.operators.keys import source_key, statistics_key
from semray.operators.plan_paths import operator_paths
from semray.planner import optimize_plan
from semray.planner.model_selection import (
    LADDER,
    allocate_cascade_targets,
)

POLICY = MinCost(quality=0.9)
SMALL_ERROR = {"sem_filter": 0.04, "sem_classify": 0.10, "sem_extract": 0.10}


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
    """Run the router over the whole input, as `semray.pipeline.ray.cascade` does, and answer each row
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
