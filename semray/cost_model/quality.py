"""Quality of a tier on an operator, measured against the top tier, and the plan-quality rule.

**Operator quality** of tier ``t`` on operator ``o`` is the share of ``o``'s input rows on which
``t`` answers as the top tier does. `measure_agreement` estimates it from the calibration
labels bought for selectivity: the same importance-sampled rows, answered by both tiers; the
Hansen-Hurwitz mean of the per-draw agreement indicator is unbiased for the population share
and carries a Wilson interval (`semray.cost_model.sampling.estimate_mean`). The top tier's
quality is 1 by definition; relational operators have quality 1.

**Plan quality** (`plan_quality`) is a lower bound by the union bound: a row of the result
can be wrong only if some semantic operator answered it differently from the top tier, so
``P(row wrong) <= sum_i (1 - q_i)`` and ``quality >= max(0, 1 - sum_i (1 - q_i))``. It needs
no independence between operators. For a chain of conjunctive filters it also bounds the
recall of the conjunction: ``recall >= 1 - sum_i (1 - recall_i)``; under independence the
recall would be the larger ``prod_i recall_i`` (`independent_quality`).

**Cascade quality** (`cascade_quality`): a cascade with target ``level`` and failure
probability ``delta`` answers at least ``level`` of its rows as the top tier does with
probability at least ``1 - delta`` over its calibration draw, and at worst none of them
otherwise, so the expected share is at least ``(1 - delta) * level``: its error
``1 - level + delta * level`` enters the union bound like any operator's. Every target counts
as accuracy (a recall or precision target of a filter implies accuracy >= its level: the
errors are at most the missed positives, or the wrongly kept rows, a fraction of all rows).

>>> plan_quality([0.95, 0.9])
0.85
>>> round(cascade_quality(0.95, 0.05), 4)
0.9025
>>> round(independent_quality([0.95, 0.9]), 3)
0.855
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from semray.cost_model.sampling import Estimate, SampleDesign, SamplingError, estimate_mean


def agreement(top: Sequence[object], other: Sequence[object]) -> npt.NDArray[np.float64]:
    """1.0 where two tiers' answers agree, else 0.0 (text compared case- and space-insensitively)."""
    if len(top) != len(other):
        raise SamplingError(f"got {len(other)} answers to compare with {len(top)}; pass one per row")
    return np.array([float(_same(a, b)) for a, b in zip(top, other, strict=True)], dtype=np.float64)


def _same(left: object, right: object) -> bool:
    if isinstance(left, str) and isinstance(right, str):
        return left.strip().casefold() == right.strip().casefold()
    if isinstance(left, float | int) and isinstance(right, float | int) and not isinstance(left, bool):
        return abs(float(left) - float(right)) < 1e-9
    return left == right


def measure_agreement(
    design: SampleDesign, top_of_rows: Sequence[object], tier_of_rows: Sequence[object], confidence: float = 0.95
) -> Estimate:
    """Estimate a tier's quality vs the top tier from answers to ``design.rows_to_label`` (same order)."""
    agree_rows = agreement(top_of_rows, tier_of_rows)
    return estimate_mean(design, design.labels_of_draws(agree_rows), confidence=confidence)


def plan_quality(qualities: Sequence[float]) -> float:
    """Lower bound on the share of result rows that match the top tier's plan: ``1 - sum(1 - q)``."""
    return max(0.0, 1.0 - sum(1.0 - q for q in qualities))


def cascade_quality(level: float, delta: float) -> float:
    """Expected share of a cascade's rows answered as the top tier does: ``(1 - delta) * level``."""
    return (1.0 - delta) * level


def independent_quality(qualities: Sequence[float]) -> float:
    """``prod(q)``: the quality if operators erred independently (not a bound; for comparison)."""
    return float(np.prod(np.asarray(qualities, dtype=np.float64))) if qualities else 1.0
