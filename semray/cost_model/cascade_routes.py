"""Cascade routing: which tier decides each row, with thresholds that meet a quality target.

A cascade answers a filter, a classification or a score with the cheapest tier that can
decide each row: the embedding tier (similarity between the row and the instruction or the
labels), then the small model (its confidence from token logprobs), then the large model.
Thresholds are learned from a calibration sample the large tier labels, drawn over the whole
input with importance weights from the embedding proxy (`sampling.py`), and chosen
by the fixed-sequence tests of `thresholds.py`. Everything here is pure numpy: the
pipeline (`pipeline/ray/cascade.py`) computes the scores, buys the labels and applies the route.
It lives in the cost model, beside the sampling and threshold statistics it is made of, so
that serving need not import the cost model (docs/architecture.md, "Layering").

What is promised (docs/cascade.md), against the large tier's answers, with probability at
least ``1 - delta`` over the calibration draw:

* ``accuracy >= level``: the error budget ``1 - level`` is split between the embedding and the
  small stage by a share computed from the proxies alone (`embedding_share`), ``delta`` evenly
  (union bound); rows neither decides go to the large tier and count as correct. Scores
  (numeric SemMap) have no embedding stage and give the small stage the whole budget.
* ``recall >= level`` (filters): rows whose embedding score is below a threshold are
  rejected; every other row goes to the large tier, so precision is 1.
* ``precision >= level`` (filters): rows whose embedding score is at or above a threshold
  are accepted; every other row goes to the large tier, whose "yes" rows are correct by
  definition, so precision stays >= level.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from semray.cost_model.sampling import Estimate, FloatArray, ImportanceProposal, SampleDesign, estimate_mean
from semray.cost_model.thresholds import (
    PROBABILITY_GRID,
    ScoredRows,
    select_cascade_thresholds,
    select_confidence_threshold,
    select_precision_threshold,
    select_recall_threshold,
)
from semray.tasks import TaskKind

Metric = Literal["accuracy", "precision", "recall"]
EMBEDDING, SMALL, LARGE = 0, 1, 2
TIER_NAMES = ("embedding", "small", "large")
NOT_ASKED = -1.0
"""Small-tier confidence of a row the small tier did not answer (below every real confidence)."""
SURE = 0.9
"""A classification proxy's softmax above which it counts as sure (`embedding_share`)."""
LABEL_TEMPERATURE = 0.05
"""Softmax temperature over cosine similarities to label names (cosines differ by ~0.05-0.2)."""


@dataclass(frozen=True, slots=True)
class Target:
    """A cascade's quality target against the large tier (plain values; see QualityTarget)."""

    kind: TaskKind
    """filter, classify or score (``TaskKind.cascades``)."""
    metric: Metric = "accuracy"
    level: float = 0.9
    delta: float = 0.05
    labels: int = 200

    def __post_init__(self) -> None:
        if self.metric != "accuracy" and self.kind != "filter":
            raise ValueError(f"{self.metric} targets are for filters, not {self.kind}")

    @property
    def has_embedding_stage(self) -> bool:
        return self.kind != "score"


@dataclass(frozen=True, slots=True)
class Route:
    """Thresholds of one cascade, journaled with the run.

    A row is decided by the embedding tier when its filter score is below ``embed_low``
    (answer no) or at least ``embed_high`` (yes), or when its classification confidence is at
    least ``embed_confidence``; else by the small tier when its confidence is at least
    ``small_confidence``; else by the large tier. Infinite thresholds decide nothing.
    """

    target: Target
    embed_low: float = -math.inf
    embed_high: float = math.inf
    embed_confidence: float = math.inf
    small_confidence: float = math.inf
    embed_method: str = "none"
    small_method: str = "none"
    n_labels: int = 0
    embedding_share: float = 0.5
    """Share of the error budget (1 - level) given to the embedding stage; the small stage gets the rest."""

    @property
    def uses_small(self) -> bool:
        return self.target.metric == "accuracy"

    def embedding_decides(self, proxy: FloatArray) -> npt.NDArray[np.bool_]:
        """Rows (by proxy score) the embedding tier decides."""
        if self.target.kind == "filter":
            return np.asarray((proxy < self.embed_low) | (proxy >= self.embed_high))
        return np.asarray(proxy >= self.embed_confidence)

    def embedding_answer(self, proxy: FloatArray) -> npt.NDArray[np.bool_]:
        """A filter's embedding decision (meaningful where `embedding_decides`)."""
        return np.asarray(proxy >= self.embed_high)

    def tiers(self, proxy: FloatArray, small_confidence: FloatArray) -> npt.NDArray[np.int8]:
        """The deciding tier of every row: EMBEDDING, SMALL or LARGE."""
        out = np.full(proxy.shape[0], LARGE, dtype=np.int8)
        small = small_confidence >= self.small_confidence
        out[small] = SMALL
        out[self.embedding_decides(proxy)] = EMBEDDING
        return out

    def to_json(self) -> dict[str, object]:
        values = asdict(self)
        return {key: (None if isinstance(v, float) and math.isinf(v) else v) for key, v in values.items()} | {
            "infinite": [key for key, v in values.items() if isinstance(v, float) and math.isinf(v)]
        }


def instruction_text(instruction: str) -> str:
    """The instruction without its ``{column}`` placeholders: what rows are compared with."""
    text = re.sub(r"\{[^{}]*\}", " ", instruction)
    return " ".join(text.split()) or instruction


def _normalised(vectors: npt.ArrayLike) -> FloatArray:
    array = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(array, axis=-1, keepdims=True)
    return np.asarray(array / np.where(norms == 0, 1.0, norms), dtype=np.float64)


def filter_proxy(rows: npt.ArrayLike, instruction: npt.ArrayLike) -> FloatArray:
    """(cos + 1) / 2 between each row's embedding and the instruction's: a score in [0, 1]."""
    cosine = _normalised(rows) @ _normalised(instruction).reshape(-1)
    return np.asarray(np.clip((cosine + 1.0) / 2.0, 0.0, 1.0), dtype=np.float64)


def classify_proxy(rows: npt.ArrayLike, labels: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """(index of the nearest label, softmax confidence over the labels) for every row."""
    cosine = _normalised(rows) @ _normalised(labels).T
    logits = cosine / LABEL_TEMPERATURE
    logits -= logits.max(axis=1, keepdims=True)
    probabilities = np.exp(logits)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    best = probabilities.argmax(axis=1)
    return best.astype(np.int64), np.asarray(probabilities.max(axis=1), dtype=np.float64)


def draw_calibration(target: Target, proxy: FloatArray, seed: int) -> SampleDesign:
    """The calibration draws, importance-weighted by the proxy over the whole input.

    Filters draw rows the proxy finds likely more often (recall and precision hinge on the
    positives); classifications draw the rows the proxy is least sure of more often (where its
    errors are); scores, which have no proxy, draw uniformly (a constant proposal).
    """
    if target.kind == "filter":
        weights = proxy
    elif target.kind == "classify":
        weights = 1.0 - proxy + 1e-3
    else:
        weights = np.ones_like(proxy)
    return ImportanceProposal.from_scores(weights).draw(budget=target.labels, seed=seed)


def route_embedding(
    target: Target,
    proxy: FloatArray | ScoredRows,
    design: SampleDesign,
    large_yes: FloatArray,
    proxy_correct: FloatArray,
) -> Route:
    """Choose the embedding stage's thresholds from the large tier's labels of the draws.

    ``large_yes[j]`` is 1 where the large tier kept draw ``j`` (filters); ``proxy_correct[j]``
    is 1 where the proxy's label equals the large tier's (classifications). ``proxy`` may come
    sorted once as `ScoredRows` when many routes are chosen over one input.
    """
    proxy = proxy if isinstance(proxy, ScoredRows) else ScoredRows.from_scores(proxy)
    route = Route(target, n_labels=int(design.rows_to_label.shape[0]))
    if not target.has_embedding_stage or design.n_draws < 4:
        return route
    if target.metric == "recall":
        chosen = select_recall_threshold(proxy, design, large_yes, recall=target.level, delta=target.delta)
        return replace(route, embed_low=chosen.threshold, embed_method=chosen.method)
    if target.metric == "precision":
        chosen = select_precision_threshold(proxy, design, large_yes, precision=target.level, delta=target.delta)
        return replace(route, embed_high=chosen.threshold, embed_method=chosen.method)
    share = embedding_share(target, proxy.scores)
    route = replace(route, embedding_share=share)
    level, delta = 1.0 - (1.0 - target.level) * share, target.delta / 2.0
    if target.kind == "filter":
        both = select_cascade_thresholds(proxy, design, large_yes, target_accuracy=level, delta=delta)
        return replace(route, embed_low=both.low, embed_high=both.high, embed_method=both.method)
    confident = select_confidence_threshold(proxy, design, proxy_correct, target_accuracy=level, delta=delta)
    return replace(route, embed_confidence=confident.threshold, embed_method=confident.method)


def route_small(
    route: Route, proxy: FloatArray, small_confidence: FloatArray, design: SampleDesign, small_correct: FloatArray
) -> Route:
    """Choose the small tier's confidence threshold over the rows the embedding left.

    ``small_confidence`` holds a small-tier confidence per row (`NOT_ASKED` where it did not
    answer), read at the draws only: the thresholds tried are `PROBABILITY_GRID`, fixed before any
    row is seen, so the small tier need not have answered the rows outside the sample (the pipeline
    asks it about those while it routes them). ``small_correct[j]`` is 1 where its answer for draw
    ``j`` equals the large tier's. Draws the embedding stage decided are counted as correct here:
    their errors are charged to the embedding stage's budget.
    """
    if not route.uses_small:
        return route
    target = route.target
    if target.has_embedding_stage:
        level, delta = 1.0 - (1.0 - target.level) * (1.0 - route.embedding_share), target.delta / 2.0
    else:
        level, delta = target.level, target.delta
    decided = route.embedding_decides(proxy)
    confidence = np.where(decided, NOT_ASKED, small_confidence)
    correct = np.where(decided[design.draws], 1.0, small_correct)
    candidates = ScoredRows.from_scores(confidence, candidates=PROBABILITY_GRID)
    chosen = select_confidence_threshold(candidates, design, correct, target_accuracy=level, delta=delta)
    threshold = chosen.threshold if chosen.threshold > NOT_ASKED else math.nextafter(NOT_ASKED, math.inf)
    if threshold > float(np.max(confidence[design.draws])):
        # Grid points above every answered draw pass with no draw decided: such a threshold was
        # never put to the test on a row, so the small tier decides nothing (always safe).
        return replace(route, small_confidence=math.inf, small_method="none")
    return replace(route, small_confidence=threshold, small_method=chosen.method)


def embedding_share(target: Target, proxy: FloatArray) -> float:
    """The embedding stage's share of the error budget, from the proxy alone (no labels, so the
    union bound over the two stages stays valid).

    A classification's embedding stage can only decide rows whose label softmax is high; when few
    rows have one (MiniLM over 24 diagnoses: almost none), the budget goes to the small tier. The
    share is the fraction of rows with confidence >= `SURE`, clipped to [0.1, 0.5]. Filters keep an
    even split: their proxy, a cosine, has no scale that says how sure it is.
    """
    if target.kind != "classify":
        return 0.5
    return float(np.clip(np.mean(proxy >= SURE), 0.1, 0.5))


def selectivity(design: SampleDesign, large_yes: FloatArray) -> Estimate:
    """The share of rows the large tier keeps, with a 95% interval, from the calibration draws alone:
    the cost model's importance-sampled selectivity, bought with labels the output reuses."""
    return estimate_mean(design, large_yes)


def tier_fractions(tiers: npt.NDArray[np.int8]) -> dict[str, float]:
    """Share of rows each tier decided, e.g. ``{"embedding": 0.4, "small": 0.5, "large": 0.1}``."""
    total = max(int(tiers.shape[0]), 1)
    return {name: float(np.sum(tiers == code)) / total for code, name in enumerate(TIER_NAMES)}
