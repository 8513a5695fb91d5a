"""Which rows to label, and what their labels say about the whole input.

Two designs draw the rows that the best tier labels:

* **importance** (`draw_importance_sample`): draws *with replacement*, row ``i`` with
  probability ``q_i = (1 - defensive) * s_i**exponent / sum(s**exponent) + defensive / N``,
  where ``s`` is a cheap proxy score (embedding similarity to the instruction, a small
  model's confidence). The uniform share ``defensive`` bounds every weight
  ``w_i = 1 / (N q_i)`` by ``1 / defensive``, so one unlucky draw cannot dominate. A row drawn
  twice is labelled once (`SampleDesign.rows_to_label`) and its label counts for both draws.
* **uniform** (`draw_uniform_sample`): ``budget`` distinct rows *without replacement*, the
  baseline.

`estimate_mean` turns per-draw 0/1 labels into a frozen `Estimate` of the population mean
(a predicate's selectivity) with a confidence interval. Importance draws use the
Hansen-Hurwitz estimator (mean of ``w * y``, unbiased) with a Wilson score interval whose
sample size is the design effect-adjusted effective size (Korn and Graubard); uniform draws
use the sample mean with a finite-population-corrected Wilson interval. See docs/cascade.md.

Example:
    >>> import numpy as np
    >>> scores = np.linspace(0.0, 1.0, 1000)
    >>> design = draw_importance_sample(scores, budget=50, seed=7)
    >>> labels = (scores[design.draws] > 0.9).astype(float)
    >>> estimate_mean(design, labels).method
    'importance-hansen-hurwitz-wilson'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np
import numpy.typing as npt

from semray.errors import SemrayError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Design = Literal["importance", "uniform"]


class SamplingError(SemrayError):
    """Sampling or estimation was asked something it cannot answer (bad scores, budget, labels)."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """A point estimate with its two-sided confidence interval.

    ``n_labels`` counts distinct labelled rows (what was paid for), not draws.
    """

    value: float
    low: float
    high: float
    confidence: float
    n_labels: int
    method: str

    def covers(self, truth: float) -> bool:
        """Whether the interval contains ``truth``."""
        return self.low <= truth <= self.high


@dataclass(frozen=True, slots=True, eq=False)
class SampleDesign:
    """The draws of one sample: which row each draw is and how likely that row was.

    Arrays are read-only; equality is identity because they are numpy arrays.
    ``probabilities[j]`` is the chance of drawing ``draws[j]`` in one draw (importance) or
    ``1 / N`` (uniform); ``weights`` are ``1 / (N * probabilities)``, so the weighted mean of
    a column over the draws is an unbiased estimate of its population mean.
    """

    draws: IntArray
    probabilities: FloatArray
    population_size: int
    design: Design
    with_replacement: bool
    population_probabilities: FloatArray

    @property
    def n_draws(self) -> int:
        return int(self.draws.shape[0])

    @property
    def weights(self) -> FloatArray:
        return 1.0 / (self.population_size * self.probabilities)

    @property
    def rows_to_label(self) -> IntArray:
        """Distinct row indices to label, ascending: each is paid for once."""
        return np.unique(self.draws)

    def split(self, first: int) -> tuple[SampleDesign, SampleDesign]:
        """The first ``first`` draws and the rest, as two designs (independent when with replacement)."""
        if not 2 <= first <= self.n_draws - 2:
            raise SamplingError(f"cannot split {self.n_draws} draws at {first}; each part needs at least 2")
        return self._take(slice(0, first)), self._take(slice(first, None))

    def _take(self, part: slice) -> SampleDesign:
        draws = self.draws[part]
        probabilities = self.probabilities[part]
        return SampleDesign(
            draws,
            probabilities,
            self.population_size,
            self.design,
            self.with_replacement,
            self.population_probabilities,
        )

    def labels_of_draws(self, labels_of_rows: npt.ArrayLike) -> FloatArray:
        """Spread labels given for `rows_to_label` (same order) back over the draws."""
        rows = self.rows_to_label
        values = np.asarray(labels_of_rows, dtype=np.float64)
        if values.shape != rows.shape:
            raise SamplingError(f"got {values.shape[0]} labels for {rows.shape[0]} rows to label; pass one per row")
        return values[np.searchsorted(rows, self.draws)]


def sampling_probabilities(scores: npt.ArrayLike, *, defensive: float = 0.1, exponent: float = 0.5) -> FloatArray:
    """Per-row draw probabilities from non-negative proxy scores, mixed with uniform.

    >>> sampling_probabilities([0.0, 1.0], defensive=0.5).round(2).tolist()
    [0.25, 0.75]
    """
    values = _checked_scores(scores)
    if not 0.0 < defensive <= 1.0:
        raise SamplingError(f"defensive share must be in (0, 1], got {defensive}; 0.1 is a good default")
    if exponent < 0:
        raise SamplingError(f"exponent must be >= 0, got {exponent}")
    n = values.shape[0]
    powered = np.power(values, exponent)
    total = float(powered.sum())
    if total <= 0.0:
        return np.full(n, 1.0 / n)
    return np.asarray((1.0 - defensive) * powered / total + defensive / n, dtype=np.float64)


@dataclass(frozen=True, slots=True, eq=False)
class ImportanceProposal:
    """Draw probabilities over a whole input, prepared once for many draws (read-only arrays)."""

    probabilities: FloatArray
    cumulative: FloatArray

    @classmethod
    def from_scores(cls, scores: npt.ArrayLike, *, defensive: float = 0.1, exponent: float = 0.5) -> ImportanceProposal:
        probabilities = sampling_probabilities(scores, defensive=defensive, exponent=exponent)
        cumulative = np.cumsum(probabilities)
        probabilities.setflags(write=False)
        cumulative.setflags(write=False)
        return cls(probabilities, cumulative)

    def draw(self, budget: int, seed: int) -> SampleDesign:
        """Draw ``budget`` rows with replacement; deterministic for ``seed``."""
        size = self.probabilities.shape[0]
        _check_budget(budget, size, with_replacement=True)
        rng = np.random.default_rng(seed)
        draws = np.searchsorted(self.cumulative, rng.random(budget) * self.cumulative[-1], side="right")
        draws = np.minimum(draws, size - 1).astype(np.int64)
        return _design(draws, self.probabilities, size, "importance", with_replacement=True)


def draw_importance_sample(
    scores: npt.ArrayLike, budget: int, seed: int, *, defensive: float = 0.1, exponent: float = 0.5
) -> SampleDesign:
    """Draw ``budget`` rows with replacement, proportionally to `sampling_probabilities`.

    Deterministic for ``seed``. At most ``budget`` distinct rows need labels. To draw many
    samples from one input, build an `ImportanceProposal` once and call its ``draw``.
    """
    return ImportanceProposal.from_scores(scores, defensive=defensive, exponent=exponent).draw(budget, seed)


def draw_uniform_sample(population_size: int, budget: int, seed: int) -> SampleDesign:
    """Draw ``budget`` distinct rows uniformly without replacement (the baseline)."""
    _check_budget(budget, population_size, with_replacement=False)
    rng = np.random.default_rng(seed)
    draws = rng.choice(population_size, size=budget, replace=False).astype(np.int64)
    uniform = np.broadcast_to(np.float64(1.0 / population_size), (population_size,))
    return _design(draws, uniform, population_size, "uniform", with_replacement=False)


def estimate_mean(design: SampleDesign, labels: npt.ArrayLike, *, confidence: float = 0.95) -> Estimate:
    """Estimate the population mean of a 0/1 label (a selectivity) from per-draw labels.

    ``labels[j]`` is the label of ``design.draws[j]`` (see `SampleDesign.labels_of_draws`).
    """
    y = np.asarray(labels, dtype=np.float64)
    if y.shape != design.draws.shape:
        raise SamplingError(f"got {y.shape[0]} labels for {design.n_draws} draws; pass one label per draw")
    if np.any((y < 0) | (y > 1)):
        raise SamplingError("labels must lie in [0, 1]")
    if not 0.0 < confidence < 1.0:
        raise SamplingError(f"confidence must be in (0, 1), got {confidence}")
    n_labels = int(design.rows_to_label.shape[0])
    n = design.n_draws
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    if design.design == "uniform":
        value = float(y.mean())
        fpc = (design.population_size - n) / max(design.population_size - 1, 1)
        n_eff = n / fpc if fpc > 0 else math.inf
        low, high = wilson_interval(value, n_eff, z)
        return Estimate(value, low, high, confidence, n_labels, "uniform-wilson")
    contributions = design.weights * y
    value = float(contributions.mean())
    variance_of_mean = float(contributions.var(ddof=1)) / n if n > 1 else math.inf
    clipped = min(max(value, 0.0), 1.0)
    # Korn-Graubard: the effective size makes a Wilson interval match the estimator's variance
    # (it exceeds n when the proxy is good). With no spread (no positive drawn) fall back to the
    # Kish size of the weights, so the interval still has width.
    if 0.0 < clipped < 1.0 and variance_of_mean > 0.0:
        n_eff = clipped * (1.0 - clipped) / variance_of_mean
    else:
        w = design.weights
        n_eff = float(w.sum() ** 2 / np.square(w).sum())
    low, high = wilson_interval(clipped, n_eff, z)
    return Estimate(value, low, high, confidence, n_labels, "importance-hansen-hurwitz-wilson")


def estimate_conditional_mean(
    design: SampleDesign, labels: npt.ArrayLike, reached: npt.ArrayLike, *, confidence: float = 0.95
) -> Estimate:
    """Estimate the mean of a 0/1 label among the rows where ``reached`` is 1 (a conditional selectivity).

    Progressive sampling labels a later filter only on the draws that passed the earlier ones;
    this is the weighted ratio ``sum(w * reached * y) / sum(w * reached)`` over the draws, with
    a Wilson interval on the Kish effective size of the reached draws' weights. With no draw
    reached the estimate is uninformative: value 0.5 in [0, 1].

    >>> design = draw_uniform_sample(10, 4, seed=1)
    >>> estimate_conditional_mean(design, [1, 0, 1, 1], [1, 1, 0, 1]).value
    0.6666666666666666
    """
    y = np.asarray(labels, dtype=np.float64)
    mask = np.asarray(reached, dtype=np.float64)
    if y.shape != design.draws.shape or mask.shape != design.draws.shape:
        raise SamplingError(f"got {y.shape[0]} labels and {mask.shape[0]} flags for {design.n_draws} draws")
    if not 0.0 < confidence < 1.0:
        raise SamplingError(f"confidence must be in (0, 1), got {confidence}")
    weights = design.weights * mask
    n_labels = int(np.unique(design.draws[mask > 0]).shape[0])
    denominator = float(weights.sum())
    if denominator <= 0.0:
        return Estimate(0.5, 0.0, 1.0, confidence, 0, "conditional-ratio-wilson")
    value = float((weights * y).sum() / denominator)
    n_eff = denominator**2 / float(np.square(weights).sum())
    if design.design == "uniform":
        fpc = (design.population_size - design.n_draws) / max(design.population_size - 1, 1)
        n_eff = n_eff / fpc if fpc > 0 else math.inf
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    low, high = wilson_interval(value, n_eff, z)
    return Estimate(value, min(low, value), max(high, value), confidence, n_labels, "conditional-ratio-wilson")


def wilson_interval(proportion: float, n_effective: float, z: float) -> tuple[float, float]:
    """Wilson score interval for a proportion observed on ``n_effective`` trials.

    >>> [round(v, 3) for v in wilson_interval(0.0, 100, 1.96)]
    [0.0, 0.037]
    """
    if math.isinf(n_effective):
        return proportion, proportion
    z2 = z * z
    denominator = 1.0 + z2 / n_effective
    centre = (proportion + z2 / (2.0 * n_effective)) / denominator
    half = z * math.sqrt(proportion * (1.0 - proportion) / n_effective + z2 / (4.0 * n_effective**2)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _checked_scores(scores: npt.ArrayLike) -> FloatArray:
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1 or values.shape[0] == 0:
        raise SamplingError("proxy scores must be a non-empty 1-D array, one score per row")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise SamplingError("proxy scores must be finite and >= 0; rescale similarities, e.g. (cos + 1) / 2")
    return values


def _check_budget(budget: int, population_size: int, *, with_replacement: bool) -> None:
    if budget < 2:
        raise SamplingError(f"a label budget of {budget} is too small; use at least 2")
    if not with_replacement and budget > population_size:
        raise SamplingError(f"cannot draw {budget} distinct rows from {population_size}; label them all instead")


def _design(
    draws: IntArray,
    population_probabilities: FloatArray,
    population_size: int,
    design: Design,
    *,
    with_replacement: bool,
) -> SampleDesign:
    probabilities = np.asarray(population_probabilities[draws], dtype=np.float64)
    draws.setflags(write=False)
    probabilities.setflags(write=False)
    return SampleDesign(draws, probabilities, population_size, design, with_replacement, population_probabilities)
