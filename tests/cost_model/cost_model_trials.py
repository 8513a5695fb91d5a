"""Exact quality of thresholds on a whole labelled input, and the binomial pass bound for trials."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from semray.cost_model.thresholds import ScoredRows

TRIALS = 1000


def binomial_upper(trials: int, p: float, level: float = 0.99) -> int:
    """Smallest k with P(Binomial(trials, p) <= k) >= level: the most failures a valid method shows."""
    cumulative = 0.0
    for k in range(trials + 1):
        cumulative += math.comb(trials, k) * p**k * (1 - p) ** (trials - k)
        if cumulative >= level:
            return k
    return trials


@dataclass(frozen=True)
class Truth:
    """Top-tier labels of every row, arranged to measure any threshold in O(log n)."""

    rows: ScoredRows
    ascending_labels: npt.NDArray[np.float64]
    positives_below: npt.NDArray[np.float64]  # positives_below[i] = positives among the i lowest scores

    @classmethod
    def of(cls, rows: ScoredRows, labels: npt.NDArray[np.float64]) -> Truth:
        ascending = np.asarray(labels, dtype=np.float64)[rows.order]
        below = np.concatenate([[0.0], np.cumsum(ascending)])
        return cls(rows, ascending, below)

    def _below(self, threshold: float) -> int:
        return int(np.searchsorted(self.rows.ascending, threshold, side="left"))

    def recall(self, threshold: float) -> float:
        total = self.positives_below[-1]
        return float((total - self.positives_below[self._below(threshold)]) / total) if total else 1.0

    def precision(self, threshold: float) -> float:
        i = self._below(threshold)
        selected = self.rows.size - i
        return float((self.positives_below[-1] - self.positives_below[i]) / selected) if selected else 1.0

    def accuracy(self, low: float, high: float) -> float:
        """Accuracy when rows < low are rejected, rows >= high accepted, the rest labelled exactly."""
        missed = self.positives_below[self._below(low)]
        h = self._below(high)
        false_accepts = (self.rows.size - h) - (self.positives_below[-1] - self.positives_below[h])
        return 1.0 - float(missed + false_accepts) / self.rows.size

    def accuracy_deciding_above(self, threshold: float) -> float:
        """Accuracy when rows >= threshold take the proxy's answer (labels say whether it is right)."""
        i = self._below(threshold)
        wrong = (self.rows.size - i) - (self.positives_below[-1] - self.positives_below[i])
        return 1.0 - float(wrong) / self.rows.size
