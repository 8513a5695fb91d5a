"""Typed, frozen estimates: intervals, one operator's estimate, a whole plan's estimate.

Every quantity a plan estimate carries is an `Interval` (a point value inside a range), so that
uncertainty in a selectivity travels into rows, tokens, dollars and latency. Arithmetic on
intervals is plain interval arithmetic: the range of a sum or product is the range of the
results over every choice of the operands within their ranges (it assumes nothing about how
the errors correlate, so it is conservative).

>>> rows = Interval(1000.0, 900.0, 1100.0)
>>> selectivity = Interval(0.2, 0.1, 0.3)
>>> kept = rows * selectivity
>>> (kept.value, kept.low, kept.high)
(200.0, 90.0, 330.0)
>>> (kept + Interval.exact(10)).value
210.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from semray.errors import SemrayError

if TYPE_CHECKING:
    from semray.cost_model.sampling import Estimate

_SLACK = 1e-9


class EstimateError(SemrayError):
    """An estimate was built from inconsistent figures (a low above its high, a NaN)."""


@dataclass(frozen=True, slots=True)
class Interval:
    """A value and the range it lies in, ``low <= value <= high``.

    ``Interval.exact(3)`` is a known figure; `from_estimate` takes a sampling `Estimate`.
    """

    value: float
    low: float
    high: float

    def __post_init__(self) -> None:
        if any(math.isnan(x) for x in (self.value, self.low, self.high)):
            raise EstimateError(f"interval has a NaN: ({self.value}, {self.low}, {self.high})")
        tolerance = _SLACK * max(1.0, abs(self.value))
        if not (self.low - tolerance <= self.value <= self.high + tolerance):
            raise EstimateError(
                f"interval needs low <= value <= high, got value {self.value} in [{self.low}, {self.high}]"
            )

    @classmethod
    def exact(cls, value: float) -> Interval:
        return cls(float(value), float(value), float(value))

    @classmethod
    def spanning(cls, value: float, low: float, high: float) -> Interval:
        """An interval with ``value`` clipped into ``[low, high]`` (estimators may fall outside their CI)."""
        return cls(min(max(float(value), float(low)), float(high)), float(low), float(high))

    @classmethod
    def from_estimate(cls, estimate: Estimate) -> Interval:
        """The interval of a sampling estimate; a Hansen-Hurwitz value past its bounds is clipped."""
        return cls.spanning(estimate.value, estimate.low, estimate.high)

    @property
    def width(self) -> float:
        return self.high - self.low

    def __add__(self, other: Interval) -> Interval:
        return Interval(self.value + other.value, self.low + other.low, self.high + other.high)

    def __mul__(self, other: Interval) -> Interval:
        products = (self.low * other.low, self.low * other.high, self.high * other.low, self.high * other.high)
        finite = [p if not math.isnan(p) else 0.0 for p in products]  # 0 * inf counts as 0 rows or tokens
        value = self.value * other.value
        return Interval.spanning(0.0 if math.isnan(value) else value, min(finite), max(finite))

    def scale(self, factor: float) -> Interval:
        """Multiply by a known figure, e.g. a price per token."""
        return self * Interval.exact(factor)

    def minimum(self, cap: float) -> Interval:
        """``min(self, cap)`` elementwise, e.g. rows after a LIMIT."""
        return Interval(min(self.value, cap), min(self.low, cap), min(self.high, cap))

    def clip(self, low: float, high: float) -> Interval:
        return Interval(min(max(self.value, low), high), min(max(self.low, low), high), min(max(self.high, low), high))

    def covers(self, truth: float) -> bool:
        return self.low <= truth <= self.high


ZERO = Interval.exact(0.0)


def total(intervals: list[Interval] | tuple[Interval, ...]) -> Interval:
    """Sum of intervals (``ZERO`` for none)."""
    result = ZERO
    for interval in intervals:
        result = result + interval
    return result


@dataclass(frozen=True, slots=True)
class EmbeddingEstimate:
    """Texts an operator embeds on the embedding tier besides its model calls (a blocked join's two
    sides, a top-k's rows and its criterion): one call per text, the texts' tokens, at the embedding
    tier's input price. ``what`` names them for EXPLAIN (``"left side"``, ``"criterion"``)."""

    what: str
    calls: Interval
    input_tokens: Interval
    dollars: Interval


@dataclass(frozen=True, slots=True)
class OperatorEstimate:
    """What one operator is expected to take and give.

    ``path`` locates the node from the root (``""`` is the root, ``"input.input"`` its
    grandchild, ``"left"``/``"right"`` a join's sides, ``"inputs.1"`` a union's second input);
    ``tier`` is the tier it runs on, ``"none"`` for relational operators (no model, no dollars).
    ``rows_in`` counts model calls' units: rows for row-wise operators, pairs for a SemJoin.
    ``quality`` is the expected share of rows answered as the top tier would, in [0, 1].
    """

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
    assumed: tuple[str, ...] = ()
    """Figures taken from documented defaults because nothing measured them (e.g. ``"selectivity"``)."""
    early_stop: str = ""
    """A LIMIT's line saying what the semantic chain under it is priced at (``limit_cost.limit_stops``)."""
    embeddings: tuple[EmbeddingEstimate, ...] = ()
    """What the operator embeds besides its model calls; already in its ``input_tokens`` and
    ``dollars`` (``rows_in`` counts the model calls' units only)."""


@dataclass(frozen=True, slots=True)
class PlanEstimate:
    """A whole plan: its output rows, summed cost and latency, and a lower bound on its quality.

    ``quality`` follows the rule in docs/cost_model.md (union bound over the semantic
    operators' error rates). ``tiers`` records which tier each semantic operator was priced at.
    """

    operators: tuple[OperatorEstimate, ...]
    rows: Interval
    dollars: Interval
    gpu_seconds: Interval
    latency_s: Interval
    quality: float

    @property
    def assumed(self) -> dict[str, tuple[str, ...]]:
        """Operator path -> the figures assumed for it, for the operators that had any."""
        return {op.path: op.assumed for op in self.operators if op.assumed}

    @property
    def tiers(self) -> dict[str, str]:
        """Operator path -> tier, for the operators that call a model."""
        return {op.path: op.tier for op in self.operators if op.tier != "none"}

    def operator(self, path: str) -> OperatorEstimate:
        """The estimate of the operator at ``path``."""
        for estimate in self.operators:
            if estimate.path == path:
                return estimate
        raise EstimateError(f"no operator at path {path!r}; paths are {[op.path for op in self.operators]}")
