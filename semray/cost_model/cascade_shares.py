"""Cascade shares from a labelled sample: run the router's own route choice on it.

The cost model prices a cascade from the shares of its input rows that its embedding stage and
its small stage decide (`semray.cost_model.cascade_cost`). Those shares depend on how good the
proxies are, which only the route choice itself can tell: `measure_cascade_shares` takes a
sample pool in which every row has its embedding proxy, the large tier's answer, and the
small tier's answer and confidence, and, for several calibration seeds, draws the calibration
sample over the pool exactly as `semray.pipeline.workers.cascade_calibration` draws it over a whole input
(`semray.cost_model.cascade_routes.draw_calibration`), chooses the embedding and small thresholds with
`route_embedding` and `route_small`, and counts the rows each tier would decide
(`Route.tiers`). The value is the mean over seeds, the interval the range.

The shares are the route's own (the calibration rows are not forced to the large tier: the
cost model prices the labels separately). They hold for the target they were measured at:
a higher level leaves more rows to the large tier, a lower one fewer.

A `CascadePool` keeps such a pool with the figures measuring bought (`semray.pipeline.runs.measure_in_run`)
and gives the shares at whatever target the cost model prices (`CascadePool.shares`, memoised per
target). Its rows come from an importance sample, so each carries a weight (`weights`, the
Hansen-Hurwitz weight of the row in the sample); `measure_cascade_shares(..., weights=...)`
corrects the bias by resampling: for each seed it draws a pool of ``rows`` rows with replacement,
row ``i`` with probability ``weights[i] / sum(weights)`` (a uniform-equivalent pool: a weighted
bootstrap), and runs the route choice on it. Resampling rather than weighting the route keeps
the router's code unchanged: the calibration draw, the threshold tests and the tier counts see a
population as the real cascade does, and the spread over seeds holds the pool's own sampling
noise as well as the calibration draw's.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> proxy = rng.random(500)
>>> large = rng.random(500) < proxy                     # the large tier keeps likely rows
>>> small = np.where(rng.random(500) < 0.9, large, ~large)
>>> confidence = np.where(small == large, 0.6 + 0.4 * rng.random(500), 0.5 + 0.3 * rng.random(500))
>>> embedding, by_small = measure_cascade_shares(QualityTarget(level=0.9), "filter", proxy, large, small, confidence)
>>> 0.0 <= embedding.low <= embedding.value <= embedding.high <= 1.0 and by_small.value > 0
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from semray.cost_model import cascade_routes as router
from semray.cost_model.cascade_cost import CascadeKind
from semray.cost_model.estimates import EstimateError, Interval
from semray.log import get_logger
from semray.operators.semantic import QualityTarget
from semray.tasks import TaskKind

log = get_logger(__name__)

DEFAULT_SEEDS: tuple[int, ...] = tuple(range(10))
"""Calibration draws per measurement: the spread over them is the shares' interval."""
MIN_POOL_ROWS = 20
"""Fewest effective rows a pool needs before its shares are trusted at any target."""
MAX_RESAMPLED_ROWS = 4000
"""Largest uniform-equivalent pool a weighted pool is resampled to (the route choice is O(rows log rows))."""

Shares = tuple[Interval, Interval]


def measure_cascade_shares(
    target: QualityTarget,
    kind: CascadeKind,
    proxy: npt.ArrayLike,
    large_answers: Sequence[object] | npt.ArrayLike,
    small_answers: Sequence[object] | npt.ArrayLike,
    small_confidence: npt.ArrayLike,
    proxy_answers: Sequence[object] | npt.ArrayLike | None = None,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    *,
    weights: npt.ArrayLike | None = None,
    rows: int | None = None,
) -> Shares:
    """(embedding share, small share) of the pool's rows under ``target``, over ``seeds``.

    Per pool row: ``proxy`` is the embedding score (a filter's similarity in [0, 1], a
    classification's label softmax confidence; ignored for scores), ``large_answers`` and
    ``small_answers`` the tiers' answers (a filter's keep decision, a label, a score; None for
    a row the tier could not answer), ``small_confidence`` the small tier's confidence, and
    ``proxy_answers`` a classification's nearest label (needed for ``kind="classify"``).

    With ``weights`` (non-negative, one per row: how many population rows each stands for, e.g.
    Hansen-Hurwitz weights of an importance sample), each seed runs the route on a resample of
    ``rows`` rows (default: the pool's size) drawn with probability proportional to the weights.
    """
    scores = np.asarray(proxy, dtype=np.float64)
    large = _as_list(large_answers)
    small = _as_list(small_answers)
    confidence = np.asarray(small_confidence, dtype=np.float64)
    nearest = _as_list(proxy_answers) if proxy_answers is not None else None
    size = scores.shape[0]
    if size == 0 or not len(large) == len(small) == confidence.shape[0] == size:
        raise EstimateError(
            f"cascade shares need one proxy, large answer, small answer and confidence per row; got "
            f"{size}, {len(large)}, {len(small)}, {confidence.shape[0]}"
        )
    if kind == TaskKind.CLASSIFY and (nearest is None or len(nearest) != size):
        raise EstimateError("a classification's cascade shares need proxy_answers: the nearest label of each row")
    if not seeds:
        raise EstimateError("give at least one calibration seed")
    mass = _resampling_mass(weights, size)
    route_target = router.Target(kind, target.metric, target.level, target.delta, target.labels)
    large_yes = np.array([float(bool(answer)) for answer in large]) if kind == TaskKind.FILTER else np.zeros(size)
    proxy_right = np.array([float(_same(a, b)) for a, b in zip(nearest or large, large, strict=True)])
    small_right = np.array([float(_same(a, b)) for a, b in zip(small, large, strict=True)])
    columns: tuple[npt.NDArray[np.float64], ...] = (scores, large_yes, proxy_right, small_right, confidence)
    shares = []
    for seed in seeds:
        if mass is None:
            shares.append(_route_shares(route_target, columns, seed))
            continue
        picks = np.random.default_rng((seed, 1)).choice(size, size=rows or size, p=mass)
        shares.append(_route_shares(route_target, tuple(column[picks] for column in columns), seed))
    found = np.array(shares)
    return _interval(found[:, 0]), _interval(found[:, 1])


def _same(answer: object, reference: object) -> bool:
    """Whether a tier's answer matches the large tier's; a failed answer (None) never does,
    as in the pipeline's cascade (`semray.pipeline.workers.cascade_tiers.answer_keys`)."""
    return answer is not None and answer == reference


def _resampling_mass(weights: npt.ArrayLike | None, size: int) -> npt.NDArray[np.float64] | None:
    if weights is None:
        return None
    mass = np.asarray(weights, dtype=np.float64)
    if mass.shape != (size,) or not np.all(np.isfinite(mass)) or np.any(mass < 0) or mass.sum() <= 0:
        raise EstimateError(f"give one finite non-negative weight per pool row ({size}), not all zero")
    return np.asarray(mass / mass.sum(), dtype=np.float64)


def _route_shares(
    target: router.Target, columns: tuple[npt.NDArray[np.float64], ...], seed: int
) -> tuple[float, float]:
    """One calibration draw's route over the rows ``columns`` describe: (proxy, large yes,
    proxy right, small right, small confidence) per row."""
    proxy, large_yes, proxy_right, small_right, small_confidence = columns
    design = router.draw_calibration(target, proxy, seed)
    route = router.route_embedding(target, proxy, design, large_yes[design.draws], proxy_right[design.draws])
    route = router.route_small(route, proxy, small_confidence, design, small_right[design.draws])
    fractions = router.tier_fractions(route.tiers(proxy, small_confidence))  # no small stage: it decides none
    return fractions["embedding"], fractions["small"]


def _as_list(values: Sequence[object] | npt.ArrayLike) -> list[object]:
    return list(values.tolist() if isinstance(values, np.ndarray) else values)  # type: ignore[arg-type]


def _interval(values: npt.NDArray[np.float64]) -> Interval:
    return Interval.spanning(float(values.mean()), float(values.min()), float(values.max()))


@dataclass(frozen=True, slots=True, eq=False)
class CascadePool:
    """One operator's labelled rows as a cascade would see them, for pricing it at any target.

    Per row: the embedding ``proxy`` exactly as the cascade computes it (a filter's
    ``router.filter_proxy``, a classification's ``router.classify_proxy`` confidence, with its
    nearest label in ``proxy_answers``), the large and small tiers' answers (None where a tier
    failed), the small tier's confidence, and the row's ``weight`` (its Hansen-Hurwitz weight in
    the importance sample the rows came from; equal weights for a uniform pool). ``population``
    is about how many input rows the pool stands for (the resampled pool's size).

    >>> pool = CascadePool("filter", (0.5,) * 40, (True, False) * 20, (True, False) * 20, (0.9,) * 40, (1.0,) * 40)
    >>> pool.rows, pool.effective_rows, pool.supports(QualityTarget(level=0.9))
    (40, 40.0, True)
    """

    kind: CascadeKind
    proxy: tuple[float, ...]
    large_answers: tuple[object, ...]
    small_answers: tuple[object, ...]
    small_confidence: tuple[float, ...]
    weights: tuple[float, ...]
    proxy_answers: tuple[object, ...] | None = None
    population: int = 0
    _shares: dict[tuple[QualityTarget, tuple[int, ...]], Shares] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Memo: model selection prices many candidates at few targets."""

    def __post_init__(self) -> None:
        size = len(self.proxy)
        lengths = (len(self.large_answers), len(self.small_answers), len(self.small_confidence), len(self.weights))
        if any(length != size for length in lengths):
            raise EstimateError(f"a cascade pool needs one of each figure per row; got {size} proxies and {lengths}")
        if self.kind == TaskKind.CLASSIFY and (self.proxy_answers is None or len(self.proxy_answers) != size):
            raise EstimateError("a classification's cascade pool needs proxy_answers: the nearest label of each row")
        if any(not math.isfinite(w) or w < 0 for w in self.weights):
            raise EstimateError("cascade pool weights must be finite and non-negative")

    @property
    def rows(self) -> int:
        """Distinct labelled rows."""
        return len(self.proxy)

    @property
    def effective_rows(self) -> float:
        """Kish's effective sample size ``(sum w)^2 / sum w^2``: what the weighted rows are worth."""
        weights = np.asarray(self.weights, dtype=np.float64)
        square = float(np.sum(weights**2))
        return float(weights.sum() ** 2 / square) if square > 0 else 0.0

    def rows_needed(self, target: QualityTarget) -> float:
        """Effective rows needed to price ``target``: `MIN_POOL_ROWS`, and enough that an error
        rate of ``1 - level`` shows at least once (``1 / (1 - level)``)."""
        return max(float(MIN_POOL_ROWS), 1.0 / (1.0 - target.level))

    def supports(self, target: QualityTarget) -> bool:
        """Whether the pool has the rows to price a cascade at ``target``."""
        return self.effective_rows >= self.rows_needed(target)

    def shares(self, target: QualityTarget, seeds: Sequence[int] = DEFAULT_SEEDS) -> Shares:
        """(embedding share, small share) at ``target``: the router's route choice on
        uniform-equivalent resamples of the pool (`measure_cascade_shares` with the weights)."""
        memo_key = (target, tuple(seeds))
        found = self._shares.get(memo_key)
        if found is None:
            found = measure_cascade_shares(
                target,
                self.kind,
                self.proxy,
                self.large_answers,
                self.small_answers,
                self.small_confidence,
                self.proxy_answers,
                seeds,
                weights=self.weights,
                rows=min(max(self.population, self.rows), MAX_RESAMPLED_ROWS),
            )
            self._shares[memo_key] = found
            log.debug(
                "cascade_shares_measured",
                kind=self.kind,
                rows=self.rows,
                effective_rows=round(self.effective_rows, 1),
                level=target.level,
                delta=target.delta,
                embedding=round(found[0].value, 4),
                small=round(found[1].value, 4),
            )
        return found

    def to_json(self) -> dict[str, Any]:
        """A summary for the journal: size, effective size, population and agreement."""
        agree = [float(_same(a, b)) for a, b in zip(self.small_answers, self.large_answers, strict=True)]
        weights = np.asarray(self.weights, dtype=np.float64)
        total = float(weights.sum())
        return {
            "kind": self.kind,
            "rows": self.rows,
            "effective_rows": round(self.effective_rows, 2),
            "population": self.population,
            "small_agreement": round(float(weights @ np.asarray(agree)) / total, 4) if total > 0 else None,
        }
