"""Cascade shares priced from a measured pool of labelled rows (`CascadePool`): at the target
being priced, so a cascade whose small tier cannot decide rows at that level is dearer than the
large tier alone and one with a strong small tier or proxy is cheaper; the importance sample's
weights make the pool stand for the whole input; too small a pool falls back with a note."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from semray.cost_model.cascade_cost import DEFAULT_CASCADE_SHARES, CascadeEstimate
from semray.cost_model.cascade_shares import CascadePool, measure_cascade_shares
from semray.cost_model.estimates import EstimateError, Interval
from semray.cost_model.measure import Measurement
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.prices import TierProfile
from semray.cost_model.sampling import ImportanceProposal
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Node, Scan, Schema, SemFilter, SourceSpec
from semray.operators.keys import source_key, statistics_key
from semray.operators.semantic import QualityTarget

SCAN = Scan(source=SourceSpec(kind="csv", path="notes.csv"), source_schema=Schema.of(("note", "VARCHAR")))
ROWS = 10_000
PROFILES = {
    "embedding": TierProfile("embedding", 0.02, 0.0, 0.0, math.inf, 8),
    "small": TierProfile("small", 0.15, 0.6, 0.0, math.inf, 8),
    "large": TierProfile("large", 2.5, 10.0, 0.0, math.inf, 8),
}
LEVEL = QualityTarget(level=0.95, delta=0.05)


def infection(**fields: object) -> SemFilter:
    return SemFilter(input=SCAN, instruction="{note} suggests an infection", **fields)  # type: ignore[arg-type]


def filter_pool(
    rows: int, small_right: float, confidence_right: tuple[float, float], confidence_wrong: tuple[float, float]
) -> CascadePool:
    """A uniform pool: an uninformative proxy, the large tier keeps 30%, the small tier right on
    ``small_right`` of the rows with confidences drawn from the two ranges."""
    rng = np.random.default_rng(0)
    large = rng.random(rows) < 0.3
    right = rng.random(rows) < small_right
    confidence = np.where(right, rng.uniform(*confidence_right, rows), rng.uniform(*confidence_wrong, rows))
    return CascadePool(
        "filter",
        tuple(rng.random(rows).tolist()),
        tuple(large.tolist()),
        tuple(np.where(right, large, ~large).tolist()),
        tuple(confidence.tolist()),
        (1.0,) * rows,
        population=rows,
    )


WEAK = filter_pool(400, 0.8, (0.5, 1.0), (0.5, 1.0))
"""The benchmark's small tier: 20% wrong, and its confidence says nothing about when."""
STRONG = filter_pool(400, 0.98, (0.7, 1.0), (0.4, 0.6))


def statistics(node: Node, pool: CascadePool | None, **extra: object) -> PlanStatistics:
    key = statistics_key(node)
    return PlanStatistics(
        source_rows={source_key(SCAN): Interval.exact(ROWS)},
        selectivity={key: Interval(0.3, 0.25, 0.35)},
        tokens_per_row={key: Interval.exact(150)},
        cascade_pools={} if pool is None else {key: pool},
        **extra,  # type: ignore[arg-type]
    )


def priced(pool: CascadePool | None, target: QualityTarget = LEVEL, **extra: object) -> tuple[CascadeEstimate, float]:
    """The cascade at ``target`` and the all-large plan, priced on the same statistics."""
    cascade = infection(tier="cascade", quality=target)
    stats = statistics(cascade, pool, **extra)
    estimate = estimate_plan(cascade, stats, PROFILES).operator("")
    assert isinstance(estimate, CascadeEstimate)
    return estimate, estimate_plan(infection(tier="large"), stats, PROFILES).dollars.value


def test_a_weak_small_tier_decides_nothing_at_095_and_the_cascade_costs_more_than_large() -> None:
    estimate, large = priced(WEAK)
    split = estimate.cascade
    assert split is not None and "cascade_shares" not in estimate.assumed
    assert split.small_share.value <= 0.05 and split.embedding_share.value <= 0.02
    assert estimate.dollars.value > large, "MinCost would not pick it: all-large is cheaper"
    # The defaults this replaces priced the same cascade well below all-large.
    assumed, _ = priced(None)
    assert "cascade_shares" in assumed.assumed and assumed.dollars.value < large


def test_a_strong_small_tier_makes_the_cascade_cheaper_than_large() -> None:
    estimate, large = priced(STRONG)
    split = estimate.cascade
    assert split is not None and split.small_share.value > 0.8
    assert estimate.dollars.value < 0.5 * large


def test_a_strong_proxy_makes_the_cascade_cheaper_even_with_a_weak_small_tier() -> None:
    rng = np.random.default_rng(3)
    large = rng.random(400) < 0.3
    proxy = np.where(large, rng.uniform(0.8, 1.0, 400), rng.uniform(0.0, 0.2, 400))  # separates the classes
    pool = CascadePool(
        "filter",
        tuple(proxy.tolist()),
        tuple(large.tolist()),
        WEAK.small_answers,
        WEAK.small_confidence,
        (1.0,) * 400,
        population=400,
    )
    # At 0.8: 200 labels cannot certify the embedding stage's share of a 0.95 target (0.975 at
    # delta 0.025) even for a perfect proxy; the router, and so the price, leaves it to the large tier.
    assert priced(pool)[0].dollars.value > priced(pool)[1]
    estimate, large_dollars = priced(pool, QualityTarget(level=0.8))
    assert estimate.cascade is not None and estimate.cascade.embedding_share.value > 0.8
    assert estimate.dollars.value < 0.5 * large_dollars


def test_shares_are_computed_at_the_target_priced_and_memoised() -> None:
    loose, strict = STRONG.shares(QualityTarget(level=0.8)), STRONG.shares(QualityTarget(level=0.99))
    assert loose[1].value >= strict[1].value
    assert STRONG.shares(QualityTarget(level=0.8)) is loose  # computed once per target


def test_too_small_a_pool_falls_back_with_a_note() -> None:
    tiny = filter_pool(15, 0.98, (0.7, 1.0), (0.4, 0.6))
    assert not tiny.supports(LEVEL)
    estimate, _ = priced(tiny)
    assert "cascade_shares" in estimate.assumed
    assert estimate.cascade is not None and estimate.cascade.small_share == DEFAULT_CASCADE_SHARES["filter"][1]
    # Measured shares, when given, come before the defaults.
    measured = (Interval.exact(0.1), Interval.exact(0.2))
    cascade = infection(tier="cascade", quality=LEVEL)
    given, _ = priced(tiny, cascade_shares={statistics_key(cascade): measured})
    assert given.cascade is not None and given.cascade.small_share.value == pytest.approx(0.2)
    assert "cascade_shares" not in given.assumed
    # 40 rows support a level of 0.95 (1 / 0.05 = 20 needed) but not 0.99 (100 needed).
    forty = filter_pool(40, 0.98, (0.7, 1.0), (0.4, 0.6))
    assert forty.supports(LEVEL) and not forty.supports(QualityTarget(level=0.99))


def test_a_classification_pool_needs_its_nearest_labels() -> None:
    with pytest.raises(EstimateError, match="proxy_answers"):
        CascadePool("classify", (0.5,), ("a",), ("a",), (0.9,), (1.0,))
    with pytest.raises(EstimateError, match="one of each"):
        CascadePool("filter", (0.5, 0.4), (True,), (True,), (0.9,), (1.0,))
    pool = CascadePool(
        "classify", (0.99,) * 30, ("a", "b") * 15, ("a", "b") * 15, (0.9,) * 30, (1.0,) * 30, ("a",) * 30
    )
    embedding, small = pool.shares(QualityTarget(level=0.9))
    assert small.value > 0.5 and 0.0 <= embedding.value <= 1.0


def test_a_failed_small_answer_never_counts_as_right() -> None:
    """None answers from both tiers (failures) do not agree, as in the pipeline's cascade."""
    none = [None] * 50
    _, small = measure_cascade_shares(
        QualityTarget(level=0.9), "filter", np.full(50, 0.5), none, none, np.full(50, 0.99), seeds=[0]
    )
    assert small.value == 0.0


# the importance sample's weights -------------------------------------------------------------


def population(rows: int) -> tuple[npt.NDArray[np.float64], ...]:
    """A proxy that predicts the large tier, and a small tier sure and right on the low-proxy rows,
    unsure and often wrong on the high-proxy ones: exactly the rows an importance draw favours."""
    rng = np.random.default_rng(1)
    proxy = rng.random(rows)
    large = rng.random(rows) < proxy**2
    hard = proxy > 0.5
    right = np.where(hard, rng.random(rows) < 0.75, rng.random(rows) < 0.995)
    confidence = np.where(
        right, np.where(hard, rng.uniform(0.5, 0.9, rows), rng.uniform(0.8, 1.0, rows)), rng.uniform(0.5, 0.85, rows)
    )
    return proxy, large, np.where(right, large, ~large), confidence


def test_weighted_pool_shares_match_the_whole_population() -> None:
    size = 3000
    proxy, large, small, confidence = population(size)
    target = QualityTarget(level=0.9)
    whole = sum(share.value for share in measure_cascade_shares(target, "filter", proxy, large, small, confidence))
    ids = tuple(str(i) for i in range(size))
    weighted, flat = [], []
    for seed in range(4):
        design = ImportanceProposal.from_scores(np.exp((proxy - 1.0) / 0.1)).draw(400, seed)
        weights = Measurement((), None, design, size, ids).row_weights()
        rows = design.rows_to_label
        assert sum(weights.values()) == pytest.approx(1.0, abs=0.2)

        def pool(of_rows: list[float], rows: npt.NDArray[np.int64] = rows) -> CascadePool:
            return CascadePool(
                "filter",
                tuple(proxy[rows].tolist()),
                tuple(large[rows].tolist()),
                tuple(small[rows].tolist()),
                tuple(confidence[rows].tolist()),
                tuple(of_rows),
                population=size,
            )

        weighted.append(sum(s.value for s in pool([weights[ids[row]] for row in rows]).shares(target)))
        flat.append(sum(s.value for s in pool([1.0] * rows.shape[0]).shares(target)))
    # The rows the cheap tiers decide: the weighted pool agrees with the whole population within
    # noise; the same rows unweighted over-count the hard rows and find far fewer.
    assert abs(float(np.mean(weighted)) - whole) < 0.05
    assert whole - float(np.mean(flat)) > 0.15
