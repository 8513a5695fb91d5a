"""A small hand-written cost model for optimizer tests, shaped like semray.cost_model's
estimates: per semantic operator, rows in x price per row of its tier; plan quality is the
product of the operators' qualities (each tier has a fixed quality)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from semray.cost_model.cardinality import default_rows
from semray.operators import Node
from semray.operators.plan_paths import operator_paths

PRICE = {"large": 10.0, "small": 1.0}
QUALITY = {"large": 1.0, "small": 0.97}


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float

    @classmethod
    def around(cls, value: float, spread: float = 0.2) -> Interval:
        return cls(value, value * (1 - spread), value * (1 + spread))


@dataclass(frozen=True)
class OperatorEstimate:
    path: str
    label: str
    tier: str
    rows_in: Interval
    rows_out: Interval
    input_tokens: Interval
    output_tokens: Interval
    dollars: Interval
    gpu_seconds: Interval
    latency_s: Interval
    quality: float


@dataclass(frozen=True)
class PlanEstimate:
    operators: tuple[OperatorEstimate, ...]
    rows: Interval
    dollars: Interval
    gpu_seconds: Interval
    latency_s: Interval
    quality: float


def estimator(
    price: Mapping[str, float] = PRICE,
    quality: Mapping[str, float] | Mapping[tuple[str, str], float] = QUALITY,
    ops_price: Mapping[str, float] | None = None,
):  # type: ignore[no-untyped-def]
    """``estimate(plan, tiers)``; ``ops_price`` scales the price of an operator by its instruction."""

    def estimate(plan: Node, tiers: Mapping[str, str] | None) -> PlanEstimate:
        operators = []
        total, plan_quality = 0.0, 1.0
        for path, node in operator_paths(plan).items():
            rows_out = default_rows(node)
            rows_in = default_rows(node.children[0]) if node.children else rows_out
            tier = "-"
            dollars, op_quality = 0.0, 1.0
            if node.calls_llm:
                tier = (tiers or {}).get(path) or (node.tier if node.tier != "auto" else "large")
                scale = (ops_price or {}).get(getattr(node, "instruction", ""), 1.0)
                dollars = rows_in * price.get(tier, price["large"]) * scale / 1000  # cascade: priced as large
                op_quality = quality.get((getattr(node, "instruction", ""), tier), quality.get(tier, 1.0))  # type: ignore[call-overload]
            total += dollars
            plan_quality *= op_quality
            operators.append(
                OperatorEstimate(
                    path=path,
                    label=node.label(),
                    tier=tier,
                    rows_in=Interval.around(rows_in),
                    rows_out=Interval.around(rows_out),
                    input_tokens=Interval.around(rows_in * 100 if node.calls_llm else 0),
                    output_tokens=Interval.around(rows_in * 5 if node.calls_llm else 0),
                    dollars=Interval.around(dollars),
                    gpu_seconds=Interval.around(0.0),
                    latency_s=Interval.around(rows_in * 0.01 if node.calls_llm else 0),
                    quality=op_quality,
                )
            )
        rows = default_rows(plan)
        return PlanEstimate(
            operators=tuple(operators),
            rows=Interval.around(rows),
            dollars=Interval.around(total),
            gpu_seconds=Interval.around(0.0),
            latency_s=Interval.around(sum(o.latency_s.value for o in operators)),
            quality=plan_quality,
        )

    return estimate


@dataclass(frozen=True)
class MinCost:
    quality: float = 0.9

    def feasible(self, estimate: PlanEstimate) -> bool:
        return estimate.quality >= self.quality

    def rank(self, estimates: Sequence[PlanEstimate]) -> list[int]:
        return sorted(
            range(len(estimates)), key=lambda i: (not self.feasible(estimates[i]), estimates[i].dollars.value)
        )


@dataclass(frozen=True)
class MaxQuality:
    budget_dollars: float

    def feasible(self, estimate: PlanEstimate) -> bool:
        return estimate.dollars.value <= self.budget_dollars

    def rank(self, estimates: Sequence[PlanEstimate]) -> list[int]:
        return sorted(range(len(estimates)), key=lambda i: (not self.feasible(estimates[i]), -estimates[i].quality))


def exhaustive(plan: Node, estimate, policy, paths: list[str], ladder=("large", "small")):  # type: ignore[no-untyped-def]
    """The policy's best over every tier assignment: (tiers, estimate)."""
    options = []
    for combo in itertools.product(ladder, repeat=len(paths)):
        tiers = dict(zip(paths, combo, strict=True))
        options.append((tiers, estimate(plan, tiers)))
    best = policy.rank([e for _, e in options])[0]
    return options[best]
