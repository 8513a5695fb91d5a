"""Usage accounting: per call (on each ``ModelResponse``), aggregated per tier, operator and run.

A ``UsageLedger`` is filled by whoever receives responses (the semantic operators' actors) and
summarised for EXPLAIN, the CLI and the run journal. Summaries from several actors add up.

>>> ledger = UsageLedger()
>>> ledger.record("sem_filter#1", ModelResponse(text="Yes", value="Yes", confidence=0.9,
...     usage=Usage(input_tokens=12, output_tokens=1, dollars=0.01), tier="small", model="sim-small"))
>>> ledger.summary().total.input_tokens
12
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from semray.serving.contract import ModelResponse, Usage

__all__ = ["Usage", "UsageLedger", "UsageSummary", "UsageTotals"]


class UsageTotals(BaseModel):
    """Sums over a set of responses."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: int = 0
    calls: int = Field(default=0, description="model calls made (repairs count twice, cache hits zero)")
    cache_hits: int = 0
    errors: int = 0
    truncated: int = 0
    repaired: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    dollars: float = 0.0
    gpu_seconds: float = 0.0
    latency_s: float = Field(default=0.0, description="sum of per-response latencies")

    def __add__(self, other: UsageTotals) -> UsageTotals:
        return UsageTotals(**{name: getattr(self, name) + getattr(other, name) for name in UsageTotals.model_fields})

    @classmethod
    def of(cls, response: ModelResponse) -> UsageTotals:
        return cls(
            requests=1,
            calls=response.calls,
            cache_hits=int(response.cache_hit),
            errors=int(response.error is not None),
            truncated=int(response.truncated),
            repaired=int(response.repaired),
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            dollars=response.usage.dollars,
            gpu_seconds=response.usage.gpu_seconds,
            latency_s=response.latency_s,
        )

    @property
    def cache_hit_rate(self) -> float:
        return self.cache_hits / self.requests if self.requests else 0.0


class UsageSummary(BaseModel):
    """Totals for a run, per tier, per operator and per (operator, tier)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total: UsageTotals = Field(default_factory=UsageTotals)
    by_tier: dict[str, UsageTotals] = Field(default_factory=dict)
    by_operator: dict[str, UsageTotals] = Field(default_factory=dict)
    by_operator_tier: dict[str, UsageTotals] = Field(default_factory=dict, description="keys '<operator>/<tier>'")

    def __add__(self, other: UsageSummary) -> UsageSummary:
        return UsageSummary(
            total=self.total + other.total,
            by_tier=_merge(self.by_tier, other.by_tier),
            by_operator=_merge(self.by_operator, other.by_operator),
            by_operator_tier=_merge(self.by_operator_tier, other.by_operator_tier),
        )

    @classmethod
    def combine(cls, summaries: Iterable[UsageSummary]) -> UsageSummary:
        result = cls()
        for summary in summaries:
            result = result + summary
        return result


def _merge(left: dict[str, UsageTotals], right: dict[str, UsageTotals]) -> dict[str, UsageTotals]:
    merged = dict(left)
    for key, totals in right.items():
        merged[key] = merged[key] + totals if key in merged else totals
    return merged


class UsageLedger:
    """Thread-safe running totals; ``summary()`` returns a frozen snapshot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._summary = UsageSummary()

    def record(self, operator: str, response: ModelResponse) -> None:
        totals = UsageTotals.of(response)
        tier = response.tier or "unknown"
        delta = UsageSummary(
            total=totals,
            by_tier={tier: totals},
            by_operator={operator: totals},
            by_operator_tier={f"{operator}/{tier}": totals},
        )
        with self._lock:
            self._summary = self._summary + delta

    def record_many(self, operator: str, responses: Iterable[ModelResponse]) -> None:
        for response in responses:
            self.record(operator, response)

    def summary(self) -> UsageSummary:
        with self._lock:
            return self._summary
