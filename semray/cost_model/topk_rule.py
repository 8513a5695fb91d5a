"""The model calls a SemTopK makes, as execution asks them and the cost model prices them.

Execution (``pipeline/workers/top_k.py``) keeps the `prefilter_rows` rows nearest to the criterion
by embedding, then ranks them by a partial quicksort: each round compares every item of each
segment still overlapping the first ``k`` positions with that segment's pivot ("is the first item
better than the second?", one call each). Lowering sizes the prefilter with `prefilter_rows`
(``pipeline/lowering/set_ops.lower_sem_topk``); the cost model prices `expected_comparisons` of
that many candidates (``semantic_cost.row_wise_cost``), so both follow one rule.

A partial quicksort of ``n`` items for the first ``m`` with uniformly placed pivots asks, in
expectation (Martínez, "Partial Quicksort", ALENEX/ANALCO 2004),

    2n + 2(n+1) H(n) - 2(n+3-m) H(n+1-m) - 6m + 6

comparisons, ``H`` the harmonic numbers: about ``2n`` for a small ``m`` (quickselect) and
``2n ln n`` for ``m = n`` (a whole quicksort). The pivots are a hash of each segment
(deterministic, so a resume asks the same questions): one input's count spreads around the
expectation (24 rows, k=3: 47.6 expected, 79 for the tickets of ``tests/pipeline/test_set_ops_ray.py``).

>>> prefilter_rows(3), round(expected_comparisons(24, 3), 1), expected_comparisons(1, 1)
(32, 47.6, 0.0)
"""

from __future__ import annotations

import math

EULER_GAMMA = 0.5772156649015329


def prefilter_rows(k: int) -> int:
    """Rows a top-k keeps by embedding similarity before comparing them: ``max(4k, 32)``.

    >>> prefilter_rows(5), prefilter_rows(100)
    (32, 400)
    """
    return max(4 * k, 32)


def harmonic(n: int) -> float:
    """``H(n) = 1 + 1/2 + ... + 1/n`` (0 for n <= 0); asymptotic past 64 terms (error < 1e-9)."""
    if n <= 0:
        return 0.0
    if n <= 64:
        return math.fsum(1.0 / i for i in range(1, n + 1))
    return math.log(n) + EULER_GAMMA + 1.0 / (2 * n) - 1.0 / (12 * n * n)


def _comparisons(n: int, m: int) -> float:
    m = min(m, n)
    if n < 2 or m < 1:
        return 0.0
    return 2 * n + 2 * (n + 1) * harmonic(n) - 2 * (n + 3 - m) * harmonic(n + 1 - m) - 6 * m + 6


def expected_comparisons(rows: float, k: int, ranks: int | None = None) -> float:
    """Expected comparisons a top-``k`` over ``rows`` input rows asks: a partial quicksort for the
    first ``k`` of its ``min(rows, prefilter_rows(k))`` candidates. Rows between two whole counts
    (an estimate) interpolate linearly; unbounded rows give the full prefilter.

    ``ranks``: only the first ``ranks`` (at most ``k``) are ever read, as when a LIMIT's rounds draw
    them from above (``workers/top_k.Ranks``): the same candidates, a quicksort refining only the
    segments those ranks reach, which asks what a partial quicksort for the first ``ranks`` asks.

    >>> round(expected_comparisons(80, 20), 1), round(expected_comparisons(80, 20, ranks=6), 1)
    (258.7, 179.6)
    """
    wanted = k if ranks is None else max(0, min(ranks, k))
    candidates = min(rows, float(prefilter_rows(k)))
    if candidates <= 0:
        return 0.0
    below = math.floor(candidates)
    low = _comparisons(below, wanted)
    if candidates == below:
        return low
    return low + (candidates - below) * (_comparisons(below + 1, wanted) - low)
