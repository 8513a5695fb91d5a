"""Thresholds on proxy scores that meet a quality target with probability at least 1 - delta.

All quality is measured against the labels of the tier that labelled the sample (the top
tier): that is what the method can promise. Every function is pure and deterministic given
its inputs; the randomness is in the `SampleDesign` (see `sampling.py`).

Three questions, one method. Each walks a label-free sequence of candidate thresholds (the
input's own proxy scores, so the order is fixed before any label is seen), tests at each
step the hypothesis "the target fails here" at level delta on the importance-weighted draws,
and stops at the first step it cannot reject (fixed-sequence testing: the chance of passing
any failing threshold is at most delta, with no union bound over the sequence). Each target
is a ratio of weighted sums, bounded one-sidedly by a Wilson score bound at the ratio's
effective sample size (Korn-Graubard), which stays calibrated when the deciding draws are
few and heavily weighted, where a plain t test passes about twice as often as it should:

* recall(t) >= g     <=> missed positives / positives <= 1 - g     (`select_recall_threshold`)
* precision(t) >= g  <=> positives above t / rows above t >= g     (`select_precision_threshold`)
* errors of rows the proxy decides / all rows <= 1 - a             (`select_confidence_threshold`,
  `select_cascade_thresholds`)

Example:
    >>> import numpy as np
    >>> from semray.cost_model.sampling import draw_importance_sample
    >>> rng = np.random.default_rng(0)
    >>> scores = rng.random(10_000)
    >>> labels = (rng.random(10_000) < scores**4).astype(float)
    >>> design = draw_importance_sample(scores, budget=500, seed=1)
    >>> choice = select_recall_threshold(scores, design, labels[design.draws], recall=0.9, delta=0.05)
    >>> 0.0 < choice.selected_fraction < 1.0
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np
import numpy.typing as npt

from semray.cost_model.sampling import FloatArray, SampleDesign, SamplingError

MAX_CANDIDATES = 2000
PROBABILITY_GRID: FloatArray = np.linspace(0.0, 1.0, MAX_CANDIDATES)
"""Candidate thresholds for a score that is a probability (a model's confidence): fixed before any
row is seen, so a threshold can be chosen from the calibration draws alone."""
PROBABILITY_GRID.setflags(write=False)


@dataclass(frozen=True, slots=True, eq=False)
class ScoredRows:
    """Proxy scores of every row of an input, sorted once for many threshold choices.

    ``candidates`` are the label-free thresholds tried (the scores, thinned to at most
    `MAX_CANDIDATES` quantiles). Arrays are read-only; equality is identity.
    """

    scores: FloatArray
    order: npt.NDArray[np.int64]
    ascending: FloatArray
    candidates: FloatArray

    @classmethod
    def from_scores(cls, scores: npt.ArrayLike, candidates: npt.ArrayLike | None = None) -> ScoredRows:
        """``candidates``: the thresholds to try, when they must not wait for every row's score (a
        grid fixed before the draw, e.g. `PROBABILITY_GRID` for a confidence); by default the
        scores themselves, thinned. Either way the sequence is label-free and fixed given the input."""
        values = np.array(scores, dtype=np.float64)
        if values.ndim != 1 or values.shape[0] == 0 or not np.all(np.isfinite(values)):
            raise SamplingError("proxy scores must be a non-empty 1-D array of finite numbers, one per row")
        order = np.argsort(values, kind="stable").astype(np.int64)
        ascending = values[order]
        if candidates is None:
            candidates = _thin(np.unique(ascending))
        else:
            candidates = _thin(np.unique(np.asarray(candidates, dtype=np.float64)))
        for array in (values, order, ascending, candidates):
            array.setflags(write=False)
        return cls(values, order, ascending, candidates)

    @property
    def size(self) -> int:
        return int(self.scores.shape[0])

    def fraction_at_least(self, threshold: float) -> float:
        """Share of rows whose score is >= ``threshold``."""
        return 1.0 - float(np.searchsorted(self.ascending, threshold, side="left")) / self.size


@dataclass(frozen=True, slots=True)
class ThresholdChoice:
    """Select rows whose score is >= ``threshold``; ``target`` >= ``level`` w.p. >= 1 - ``delta``.

    ``estimated`` is the weighted point estimate of the target at the threshold;
    ``selected_fraction`` is exact (scores are known for every row).
    """

    target: Literal["recall", "precision"]
    level: float
    delta: float
    threshold: float
    estimated: float
    selected_fraction: float
    n_labels: int
    method: str


@dataclass(frozen=True, slots=True)
class ConfidenceChoice:
    """Let the proxy decide rows whose confidence is >= ``threshold``; send the rest on.

    Accuracy over all rows is >= ``target_accuracy`` w.p. >= 1 - ``delta`` when the rows sent
    on are labelled like the sample (by the top tier).
    """

    threshold: float
    target_accuracy: float
    delta: float
    estimated_error: float
    decided_fraction: float
    n_labels: int
    method: str


@dataclass(frozen=True, slots=True)
class CascadeChoice:
    """Reject rows with score < ``low``, accept rows with score >= ``high``, defer the middle."""

    low: float
    high: float
    target_accuracy: float
    delta: float
    estimated_error: float
    deferred_fraction: float
    n_labels: int
    method: str


def select_recall_threshold(
    scores: ScoredRows | npt.ArrayLike, design: SampleDesign, labels: npt.ArrayLike, *, recall: float, delta: float
) -> ThresholdChoice:
    """The highest threshold whose recall is >= ``recall`` w.p. >= 1 - ``delta``.

    Walks thresholds upwards from "select everything" (recall 1).
    """
    rows, s, m, y = _prepare(scores, design, labels, recall, delta)
    candidates = rows.candidates  # ascending
    order = np.argsort(s, kind="stable")
    positive = (m * y)[order]
    below = np.searchsorted(s[order], candidates, side="left")  # draws below each candidate
    missed, missed_sq = _prefix_sums(positive)[below], _prefix_sums(positive**2)[below]
    total, total_sq = float(positive.sum()), float(np.sum(positive**2))
    upper = _ratio_bound(
        missed, missed_sq, np.full_like(missed, total), np.full_like(missed, total_sq), s.shape[0], delta, "upper"
    )
    passes = upper <= 1.0 - recall
    passes[0] = True  # selecting every row has recall 1
    k = _last_of_first_run(passes)
    estimated = 1.0 - float(missed[k] / total) if total > 0 else 1.0
    return ThresholdChoice(
        "recall",
        recall,
        delta,
        float(candidates[k]),
        estimated,
        rows.fraction_at_least(float(candidates[k])),
        design.rows_to_label.shape[0],
        "importance-fixed-sequence-wilson",
    )


def select_precision_threshold(
    scores: ScoredRows | npt.ArrayLike,
    design: SampleDesign,
    labels: npt.ArrayLike,
    *,
    precision: float,
    delta: float,
    min_expected_draws: float = 30.0,
) -> ThresholdChoice:
    """The lowest threshold whose precision is >= ``precision`` w.p. >= 1 - ``delta``.

    Walks thresholds downwards, starting where ``min_expected_draws`` draws are expected
    above the threshold (a label-free start, so the sequence stays fixed). Returns
    ``threshold=inf`` (select nothing) when even the start cannot be certified.
    """
    rows, s, m, y = _prepare(scores, design, labels, precision, delta)
    candidates = rows.candidates[::-1]  # descending
    start = _precision_start(rows, candidates, design, min_expected_draws)
    candidates = candidates[start:]
    order = np.argsort(s, kind="stable")
    weight, positive = m[order], (m * y)[order]
    idx = np.searchsorted(s[order], candidates, side="left")  # first draw at or above each candidate
    hits, hits_sq = _suffix_sums(positive)[idx], _suffix_sums(positive * weight)[idx]
    selected, selected_sq = _suffix_sums(weight)[idx], _suffix_sums(weight**2)[idx]
    lower = _ratio_bound(hits, hits_sq, selected, selected_sq, s.shape[0], delta, "lower")
    passes = lower >= precision
    if not passes[0]:
        return ThresholdChoice("precision", precision, delta, math.inf, 1.0, 0.0, design.rows_to_label.shape[0], "none")
    k = _last_of_first_run(passes)
    estimated = float(hits[k] / selected[k]) if selected[k] > 0 else 1.0
    return ThresholdChoice(
        "precision",
        precision,
        delta,
        float(candidates[k]),
        estimated,
        rows.fraction_at_least(float(candidates[k])),
        design.rows_to_label.shape[0],
        "importance-fixed-sequence-wilson",
    )


def select_confidence_threshold(
    confidence: ScoredRows | npt.ArrayLike,
    design: SampleDesign,
    correct: npt.ArrayLike,
    *,
    target_accuracy: float,
    delta: float,
) -> ConfidenceChoice:
    """The lowest confidence above which the proxy's answers keep accuracy >= target w.p. 1 - delta.

    ``correct[j]`` says whether the proxy's answer for draw ``j`` agrees with the top tier.
    Rows below the threshold go to the next tier and are counted as correct.
    """
    rows, c, m, ok = _prepare(confidence, design, correct, target_accuracy, delta)
    threshold, estimated = _decided_error(rows.candidates, c, m, ok, target_accuracy, delta)
    return ConfidenceChoice(
        threshold,
        target_accuracy,
        delta,
        estimated,
        rows.fraction_at_least(threshold),
        design.rows_to_label.shape[0],
        "importance-fixed-sequence-wilson" if math.isfinite(threshold) else "none",
    )


def select_cascade_thresholds(
    scores: ScoredRows | npt.ArrayLike,
    design: SampleDesign,
    labels: npt.ArrayLike,
    *,
    target_accuracy: float,
    delta: float,
    calibration_share: float = 0.5,
) -> CascadeChoice:
    """Two thresholds for a yes/no decision: reject below ``low``, accept at or above ``high``.

    The first ``calibration_share`` of the draws fit a weighted logistic curve
    ``p(s) = sigmoid(a + b s)``; it orders rows by how sure the proxy is (``|a + b s|``).
    The remaining draws certify, by `select_confidence_threshold`, how far that order can go.
    Falls back to deferring everything when the fit finds no signal (``b <= 0``).
    """
    rows, s, m, y = _prepare(scores, design, labels, target_accuracy, delta)
    first = round(design.n_draws * calibration_share)
    _, test_part = design.split(first)
    fitted = _fit_logistic(s[:first], m[:first], y[:first])
    n_labels = design.rows_to_label.shape[0]
    if fitted is None:
        return CascadeChoice(-math.inf, math.inf, target_accuracy, delta, 0.0, 1.0, n_labels, "none")
    a, b = fitted

    def margin_of(values: FloatArray) -> FloatArray:
        # |logit p(s)|: the proxy's sureness, growing with the distance from p(s) = 1/2.
        return np.asarray(np.abs(a + b * values), dtype=np.float64)

    centre = -a / b
    correct = ((s[first:] >= centre) == (y[first:] > 0.5)).astype(np.float64)
    candidates = np.unique(margin_of(rows.candidates))
    cut, estimated = _decided_error(
        candidates, margin_of(s[first:]), test_part.weights, correct, target_accuracy, delta
    )
    if math.isinf(cut):
        return CascadeChoice(-math.inf, math.inf, target_accuracy, delta, 0.0, 1.0, n_labels, "none")
    # Decided rows: a + b s >= cut (accept) or a + b s <= -cut (reject). Rounding the bounds
    # toward deferring keeps the decided set inside the certified one (fewer decided rows
    # can only mean fewer errors).
    high = float(np.nextafter((cut - a) / b, math.inf))
    low = float((-cut - a) / b)
    deferred = rows.fraction_at_least(low) - rows.fraction_at_least(high)
    return CascadeChoice(
        low,
        high,
        target_accuracy,
        delta,
        estimated,
        deferred,
        n_labels,
        "importance-logistic-split-fixed-sequence-wilson",
    )


def _decided_error(
    ascending_candidates: FloatArray, c: FloatArray, m: FloatArray, ok: FloatArray, target_accuracy: float, delta: float
) -> tuple[float, float]:
    """(threshold, estimated error) for deciding rows with confidence >= threshold; walks downwards.

    The threshold is inf (decide nothing) when not even the most confident row is certified.
    """
    budget = 1.0 - target_accuracy
    candidates = ascending_candidates[::-1]
    order = np.argsort(c, kind="stable")
    weight = m[order]
    loss = weight * (1.0 - ok[order])
    idx = np.searchsorted(c[order], candidates, side="left")
    errors, errors_sq = _suffix_sums(loss)[idx], _suffix_sums(loss * weight)[idx]
    total, total_sq = float(weight.sum()), float(np.sum(weight**2))
    n = c.shape[0]
    upper = _ratio_bound(
        errors, errors_sq, np.full_like(errors, total), np.full_like(errors, total_sq), n, delta, "upper"
    )
    passes = upper <= budget
    if not passes[0]:
        return math.inf, 0.0
    k = _last_of_first_run(passes)
    return float(candidates[k]), float(errors[k] / total)


def _prepare(
    scores: ScoredRows | npt.ArrayLike, design: SampleDesign, labels: npt.ArrayLike, level: float, delta: float
) -> tuple[ScoredRows, FloatArray, FloatArray, FloatArray]:
    rows = scores if isinstance(scores, ScoredRows) else ScoredRows.from_scores(scores)
    if rows.size != design.population_size:
        raise SamplingError(
            f"got {rows.size} scores for an input of {design.population_size} rows; pass one score per row"
        )
    y = np.asarray(labels, dtype=np.float64)
    if y.shape != design.draws.shape or np.any((y < 0) | (y > 1)):
        raise SamplingError(f"pass one 0/1 label per draw ({design.n_draws} draws)")
    if not 0.0 < level < 1.0:
        raise SamplingError(f"target level must be in (0, 1), got {level}")
    if not 0.0 < delta < 0.5:
        raise SamplingError(f"delta must be in (0, 0.5), got {delta}")
    return rows, rows.scores[design.draws], design.weights, y


def _thin(values: FloatArray) -> FloatArray:
    """At most `MAX_CANDIDATES` of ascending ``values``, evenly spaced by rank (label-free)."""
    if values.shape[0] > MAX_CANDIDATES:
        positions = np.linspace(0, values.shape[0] - 1, MAX_CANDIDATES).round().astype(np.int64)
        values = values[np.unique(positions)]
    return np.asarray(values, dtype=np.float64)


def _precision_start(rows: ScoredRows, descending: FloatArray, design: SampleDesign, min_expected_draws: float) -> int:
    """First candidate (walking down) above which ``min_expected_draws`` draws are expected."""
    need = min_expected_draws / design.n_draws  # probability mass above the start
    if not design.with_replacement:
        top = min(rows.size, math.ceil(need * rows.size))
    else:
        # Walk down from the highest scores in doubling chunks: the start is usually near the top.
        probabilities = np.asarray(design.population_probabilities)
        top, mass = 0, 0.0
        chunk = 1024
        while top < rows.size and mass < need:
            taken = rows.order[rows.size - min(rows.size, top + chunk) : rows.size - top][::-1]
            running = mass + np.cumsum(probabilities[taken])
            reached = np.flatnonzero(running >= need)
            if reached.shape[0]:
                top += int(reached[0]) + 1
                break
            top, mass, chunk = top + taken.shape[0], float(running[-1]), chunk * 2
    start_score = rows.ascending[max(rows.size - max(top, 1), 0)]
    at_or_below = np.flatnonzero(descending <= start_score)
    return int(at_or_below[0]) if at_or_below.shape[0] else descending.shape[0] - 1


def _suffix_sums(values: FloatArray) -> FloatArray:
    """out[i] = values[i:].sum(), with out[len] = 0."""
    out = np.zeros(values.shape[0] + 1)
    out[:-1] = np.cumsum(values[::-1])[::-1]
    return out


def _ratio_bound(
    numerator: FloatArray,
    numerator_sq: FloatArray,
    denominator: FloatArray,
    denominator_sq: FloatArray,
    n: int,
    delta: float,
    side: Literal["upper", "lower"],
) -> FloatArray:
    """One-sided (1 - delta) Wilson bound of R = sum(b h) / sum(b) over n draws, h in {0, 1}.

    ``numerator`` = sum(b h), ``numerator_sq`` = sum(b^2 h), ``denominator`` = sum(b),
    ``denominator_sq`` = sum(b^2). The linearised variance of R gives the effective size
    R (1 - R) / var; when R is 0 or 1 (no spread) the Kish size of the b's stands in.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(denominator > 0, numerator / denominator, 0.0)
        residual_sq = numerator_sq * (1.0 - 2.0 * ratio) + ratio**2 * denominator_sq
        variance = residual_sq / (n * max(n - 1, 1)) / (denominator / n) ** 2
        kish = np.where(denominator_sq > 0, denominator**2 / denominator_sq, 0.0)
        informative = (ratio > 0) & (ratio < 1) & (variance > 0)
        size = np.where(informative, ratio * (1.0 - ratio) / variance, kish)
        z = NormalDist().inv_cdf(1.0 - delta)
        z2 = z * z
        centre = (ratio + z2 / (2 * size)) / (1 + z2 / size)
        half = z * np.sqrt(ratio * (1 - ratio) / size + z2 / (4 * size**2)) / (1 + z2 / size)
    bound = centre + half if side == "upper" else centre - half
    empty = size <= 0
    return np.where(empty, 1.0 if side == "upper" else 0.0, np.clip(bound, 0.0, 1.0))


def _prefix_sums(values: FloatArray) -> FloatArray:
    """out[i] = values[:i].sum(), with out[0] = 0."""
    out = np.zeros(values.shape[0] + 1)
    out[1:] = np.cumsum(values)
    return out


def _last_of_first_run(passes: npt.NDArray[np.bool_]) -> int:
    """Index of the last True before the first False (passes[0] must be True)."""
    failed = np.flatnonzero(~passes)
    return int(failed[0] - 1) if failed.shape[0] else int(passes.shape[0] - 1)


def _fit_logistic(s: FloatArray, w: FloatArray, y: FloatArray) -> tuple[float, float] | None:
    """Weighted logistic regression of y on s by Newton steps; None without a positive slope."""
    if s.shape[0] < 4 or y.min() == y.max():
        return None
    centre, scale = float(np.mean(s)), float(np.std(s)) or 1.0
    x = np.column_stack([np.ones_like(s), (s - centre) / scale])
    beta = np.zeros(2)
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(x @ beta)))
        gradient = x.T @ (w * (y - p))
        hessian = (x * (w * p * (1 - p))[:, None]).T @ x + 1e-6 * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        beta = beta + step
        if float(np.abs(step).max()) < 1e-9:
            break
    if not np.all(np.isfinite(beta)) or beta[1] <= 0:
        return None
    slope = float(beta[1] / scale)
    return float(beta[0] - beta[1] * centre / scale), slope
