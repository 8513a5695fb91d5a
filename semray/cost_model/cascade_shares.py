"""Cascade shares from a labelled sample: run the router's own route choice on it.

The cost model prices a cascade from the shares of its input rows that its embedding stage and
its small stage decide (`semray.cost_model.cascade_cost`). Those shares depend on how good the
proxies are, which only the route choice itself can tell: `measure_cascade_shares` takes a
sample pool in which every row has its embedding proxy, the large tier's answer, and the
small tier's answer and confidence, and, for several calibration seeds, draws the calibration
sample over the pool exactly as `semray.pipeline.cascade` draws it over a whole input
(`semray.serving.router.draw_calibration`), chooses the embedding and small thresholds with
`route_embedding` and `route_small`, and counts the rows each tier would decide
(`Route.tiers`). The value is the mean over seeds, the interval the range.

The shares are the route's own (the calibration rows are not forced to the large tier: the
cost model prices the labels separately). They hold for the target they were measured at:
a higher level leaves more rows to the large tier, a lower one fewer.

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

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from semray.cost_model.cascade_cost import CascadeKind
from semray.cost_model.estimates import EstimateError, Interval
from semray.operators.semantic import QualityTarget
from semray.serving import router

DEFAULT_SEEDS: tuple[int, ...] = tuple(range(10))
"""Calibration draws per measurement: the spread over them is the shares' interval."""


def measure_cascade_shares(
    target: QualityTarget,
    kind: CascadeKind,
    proxy: npt.ArrayLike,
    large_answers: Sequence[object] | npt.ArrayLike,
    small_answers: Sequence[object] | npt.ArrayLike,
    small_confidence: npt.ArrayLike,
    proxy_answers: Sequence[object] | npt.ArrayLike | None = None,
    seeds: Sequence[int] = DEFAULT_SEEDS,
) -> tuple[Interval, Interval]:
    """(embedding share, small share) of the pool's rows under ``target``, over ``seeds``.

    Per pool row: ``proxy`` is the embedding score (a filter's similarity in [0, 1], a
    classification's label softmax confidence; ignored for scores), ``large_answers`` and
    ``small_answers`` the tiers' answers (a filter's keep decision, a label, a score),
    ``small_confidence`` the small tier's confidence, and ``proxy_answers`` a
    classification's nearest label (needed for ``kind="classify"``).
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
    if kind == "classify" and (nearest is None or len(nearest) != size):
        raise EstimateError("a classification's cascade shares need proxy_answers: the nearest label of each row")
    if not seeds:
        raise EstimateError("give at least one calibration seed")
    route_target = router.Target(kind, target.metric, target.level, target.delta, target.labels)
    large_yes = np.array([float(bool(answer)) for answer in large]) if kind == "filter" else np.zeros(size)
    proxy_right = np.array([float(a == b) for a, b in zip(nearest or large, large, strict=True)])
    small_right = np.array([float(a == b) for a, b in zip(small, large, strict=True)])
    shares = np.array(
        [_route_shares(route_target, scores, large_yes, proxy_right, small_right, confidence, seed) for seed in seeds]
    )
    embedding, by_small = shares[:, 0], shares[:, 1]
    return _interval(embedding), _interval(by_small)


def _route_shares(
    target: router.Target,
    proxy: npt.NDArray[np.float64],
    large_yes: npt.NDArray[np.float64],
    proxy_right: npt.NDArray[np.float64],
    small_right: npt.NDArray[np.float64],
    small_confidence: npt.NDArray[np.float64],
    seed: int,
) -> tuple[float, float]:
    design = router.draw_calibration(target, proxy, seed)
    route = router.route_embedding(target, proxy, design, large_yes[design.draws], proxy_right[design.draws])
    route = router.route_small(route, proxy, small_confidence, design, small_right[design.draws])
    fractions = router.tier_fractions(route.tiers(proxy, small_confidence))  # no small stage: it decides none
    return fractions["embedding"], fractions["small"]


def _as_list(values: Sequence[object] | npt.ArrayLike) -> list[object]:
    return list(values.tolist() if isinstance(values, np.ndarray) else values)  # type: ignore[arg-type]


def _interval(values: npt.NDArray[np.float64]) -> Interval:
    return Interval.spanning(float(values.mean()), float(values.min()), float(values.max()))
