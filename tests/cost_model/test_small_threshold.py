"""The small tier's confidence threshold (`cascade_routes.route_small`) is chosen from the calibration
draws alone: the thresholds it tries are a grid fixed before any row is seen, so the pipeline can
route the rows outside the sample while the small tier answers them, instead of asking it about
every row first (docs/cascade.md, "The cascade router").
"""

from __future__ import annotations

import math

import numpy as np

from semray.cost_model import cascade_routes as router

ROWS = 5_000


def _population(seed: int = 3) -> tuple[router.Route, np.ndarray, np.ndarray, np.ndarray]:
    """A filter whose embedding stage decides nothing, a small tier right on 90% of rows whose
    confidence separates right from wrong answers; (route, proxy, confidence, right)."""
    rng = np.random.default_rng(seed)
    proxy = rng.random(ROWS)
    right = rng.random(ROWS) < 0.9
    confidence = 1.0 / (1.0 + np.exp(-rng.normal(np.where(right, 2.0, 0.0), 1.0)))
    return router.Route(router.Target("filter", "accuracy", 0.9, 0.05, 300)), proxy, confidence, right


def test_the_threshold_reads_the_small_tiers_confidence_at_the_draws_only() -> None:
    route, proxy, confidence, right = _population()
    design = router.draw_calibration(route.target, proxy, seed=11)
    correct = right[design.draws].astype(float)
    known = router.route_small(route, proxy, confidence, design, correct)
    # What the pipeline knows when it chooses: the small tier's answers for the drawn rows only.
    drawn_only = np.full(ROWS, router.NOT_ASKED)
    drawn_only[design.rows_to_label] = confidence[design.rows_to_label]
    chosen = router.route_small(route, proxy, drawn_only, design, correct)
    assert math.isfinite(chosen.small_confidence), "a useful small tier decides rows"
    assert chosen.small_confidence == known.small_confidence
    # Deciding rows at that threshold still meets the target on the whole input (this draw).
    decided = confidence >= chosen.small_confidence
    assert 1.0 - np.mean(decided & ~right) >= 0.9


def test_a_threshold_no_draw_reached_decides_nothing() -> None:
    route, proxy, _, _ = _population()
    design = router.draw_calibration(route.target, proxy, seed=11)
    # The small tier answers at random, always as sure: the walk fails at the first draw, and the
    # grid points above every draw, which passed with no draw decided, were never put to the test.
    rng = np.random.default_rng(5)
    confidence = np.full(ROWS, 0.55)
    chosen = router.route_small(route, proxy, confidence, design, (rng.random(design.n_draws) < 0.5).astype(float))
    assert chosen.small_confidence == math.inf and chosen.small_method == "none"
