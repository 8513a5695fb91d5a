"""Cascade pricing: embedding on every row, large-tier labels and undecided rows, small tier on
what the embedding leaves; shares measured by the router's own route choice or assumed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from semray.cost_model import cascade_routes as router
from semray.cost_model.cascade_cost import DEFAULT_CASCADE_SHARES, CascadeEstimate, cascade_kind
from semray.cost_model.cascade_shares import measure_cascade_shares
from semray.cost_model.estimates import EstimateError, Interval
from semray.cost_model.plan_cost import MissingStatisticsError, estimate_plan
from semray.cost_model.prices import TierProfile
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Node, Scan, Schema, SemClassify, SemExtract, SemFilter, SemMap, SourceSpec
from semray.operators.keys import source_key, statistics_key
from semray.operators.semantic import QualityTarget

SCAN = Scan(source=SourceSpec(kind="csv", path="notes.csv"), source_schema=Schema.of(("note", "VARCHAR")))
ROWS = 10_000
PROFILES = {
    "embedding": TierProfile("embedding", 0.02, 0.0, 0.0, math.inf, 8),
    "small": TierProfile("small", 0.15, 0.6, 0.0, math.inf, 8),
    "large": TierProfile("large", 2.5, 10.0, 0.0, math.inf, 8),
}


def infection(**fields: object) -> SemFilter:
    return SemFilter(input=SCAN, instruction="{note} suggests an infection", **fields)  # type: ignore[arg-type]


def statistics(node: Node, shares: tuple[Interval, Interval] | None = None) -> PlanStatistics:
    key = statistics_key(node)
    return PlanStatistics(
        source_rows={source_key(SCAN): Interval.exact(ROWS)},
        selectivity={key: Interval(0.3, 0.25, 0.35)},
        tokens_per_row={key: Interval.exact(150)},
        cascade_shares={} if shares is None else {key: shares},
    )


def shares(embedding: float, small: float) -> tuple[Interval, Interval]:
    return Interval.exact(embedding), Interval.exact(small)


def dollars(node: Node, stats: PlanStatistics, tiers: dict[str, str] | None = None) -> float:
    return estimate_plan(node, stats, PROFILES, tiers).dollars.value


def test_a_cascade_is_cheaper_than_all_large_when_the_cheap_tiers_decide_most_rows() -> None:
    node = infection()
    favourable = statistics(node, shares(0.4, 0.45))
    cascade, large = dollars(node, favourable, {"": "cascade"}), dollars(node, favourable)
    assert cascade < 0.35 * large


def test_a_cascade_is_dearer_than_all_large_when_the_large_tier_decides_almost_everything() -> None:
    node = infection()
    unfavourable = statistics(node, shares(0.0, 0.02))
    assert dollars(node, unfavourable, {"": "cascade"}) > dollars(node, unfavourable)


def test_rows_per_tier_follow_the_shares_and_the_calibration_labels() -> None:
    node = infection(quality=QualityTarget(level=0.9, delta=0.05, labels=300))
    estimate = estimate_plan(node, statistics(node, shares(0.3, 0.5)), PROFILES).operator("")
    assert isinstance(estimate, CascadeEstimate) and estimate.tier == "cascade"
    split = estimate.cascade
    assert split is not None
    assert split.embedding_rows.value == ROWS
    assert split.small_rows.value == pytest.approx(ROWS)  # every row: it does not wait for the embedding thresholds
    assert split.large_rows.value == pytest.approx(300 + 0.2 * (ROWS - 300))
    assert split.large_share.value == pytest.approx(0.2)
    assert estimate.quality == pytest.approx(0.95 * 0.9)  # (1 - delta) * level
    assert estimate.rows_out.value == pytest.approx(0.3 * ROWS)
    per_row = {"large": 150 * 2.5e-6 + 1 * 10e-6, "small": 150 * 0.15e-6 + 1 * 0.6e-6}
    llm = split.large_rows.value * per_row["large"] + split.small_rows.value * per_row["small"]
    assert llm < estimate.dollars.value < llm + ROWS * 150 * 0.02e-6  # plus the embedded text


def test_labels_cap_at_the_input_rows() -> None:
    node = infection(tier="cascade")
    stats = statistics(node, shares(0.0, 0.0)).merged(
        PlanStatistics(source_rows={source_key(SCAN): Interval.exact(50)})
    )
    split = estimate_plan(node, stats, PROFILES).operator("").cascade  # type: ignore[attr-defined]
    assert split.labels.value == 50 and split.large_rows.value == 50


def test_unmeasured_shares_take_the_documented_default_and_say_so() -> None:
    node = infection(tier="cascade")
    estimate = estimate_plan(node, statistics(node), PROFILES).operator("")
    assert "cascade_shares" in estimate.assumed
    assert estimate.cascade.embedding_share == DEFAULT_CASCADE_SHARES["filter"][0]  # type: ignore[attr-defined]
    with pytest.raises(MissingStatisticsError, match="measure_cascade_shares"):
        estimate_plan(node, statistics(node), PROFILES, strict=True)


def test_recall_targets_skip_the_small_tier_and_scores_the_embedding_tier() -> None:
    recall = infection(quality=QualityTarget(metric="recall", level=0.9))
    split = estimate_plan(recall, statistics(recall, shares(0.4, 0.5)), PROFILES).operator("").cascade  # type: ignore[attr-defined]
    assert split.small_rows.value == 0 and split.large_share.value == pytest.approx(0.6)
    score = SemMap(input=SCAN, instruction="severity of {note}", output="severity", output_type="int", lo=1, hi=5)
    score = SemMap.model_validate({**score.model_dump(), "input": SCAN, "tier": "cascade"})
    split = estimate_plan(score, statistics(score, shares(0.4, 0.5)), PROFILES).operator("").cascade  # type: ignore[attr-defined]
    assert split.embedding_rows.value == 0 and split.small_rows.value == ROWS
    assert split.large_share.value == pytest.approx(0.5)


def test_auto_with_a_target_is_priced_as_a_cascade_and_shares_the_plain_operators_statistics() -> None:
    plain, targeted = infection(), infection(quality=QualityTarget(level=0.95))
    assert statistics_key(plain) == statistics_key(targeted)
    estimate = estimate_plan(targeted, statistics(plain, shares(0.3, 0.3)), PROFILES).operator("")
    assert estimate.tier == "cascade" and "cascade_shares" not in estimate.assumed


def test_only_filters_classifications_and_scores_cascade() -> None:
    assert cascade_kind(infection()) == "filter"
    assert cascade_kind(SemClassify(input=SCAN, instruction="topic of {note}", labels=("a", "b"))) == "classify"
    assert cascade_kind(SemMap(input=SCAN, instruction="summary of {note}", output="s")) is None
    extract = SemExtract.model_validate(
        {"input": SCAN, "instruction": "from {note}", "fields": [{"name": "sender"}], "tier": "auto"}
    )
    with pytest.raises(EstimateError, match="cannot run as a cascade"):
        estimate_plan(extract, statistics(extract), PROFILES, {"": "cascade"})


def test_a_cascade_needs_the_embedding_tiers_price() -> None:
    node = infection(tier="cascade")
    profiles = {name: profile for name, profile in PROFILES.items() if name != "embedding"}
    with pytest.raises(MissingStatisticsError, match="embedding"):
        estimate_plan(node, statistics(node, shares(0.3, 0.3)), profiles)


# measured shares ---------------------------------------------------------------------------


def pool(size: int = 2000, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    proxy = rng.beta(0.6, 1.5, size)
    large = rng.random(size) < proxy
    right = rng.random(size) < 0.9
    small = np.where(right, large, ~large)
    confidence = np.where(right, rng.uniform(0.55, 1.0, size), rng.uniform(0.5, 0.8, size))
    return proxy, large, small, confidence


def test_measured_shares_are_the_routers_own_fractions() -> None:
    proxy, large, small, confidence = pool()
    target = QualityTarget(level=0.9, delta=0.05, labels=200)
    embedding, by_small = measure_cascade_shares(target, "filter", proxy, large, small, confidence, seeds=[11])
    route_target = router.Target("filter", "accuracy", 0.9, 0.05, 200)
    design = router.draw_calibration(route_target, proxy, 11)
    right = (small == large).astype(float)
    route = router.route_embedding(route_target, proxy, design, large.astype(float)[design.draws], right[design.draws])
    route = router.route_small(route, proxy, confidence, design, right[design.draws])
    fractions = router.tier_fractions(route.tiers(proxy, confidence))
    assert embedding.value == pytest.approx(fractions["embedding"])
    assert by_small.value == pytest.approx(fractions["small"])


def test_measured_shares_span_the_seeds_and_a_higher_level_leaves_more_to_the_large_tier() -> None:
    proxy, large, small, confidence = pool()
    low = measure_cascade_shares(QualityTarget(level=0.8), "filter", proxy, large, small, confidence)
    high = measure_cascade_shares(QualityTarget(level=0.97), "filter", proxy, large, small, confidence)
    assert all(share.low <= share.value <= share.high for share in (*low, *high))
    assert low[0].value + low[1].value > high[0].value + high[1].value


def test_classification_shares_need_the_proxys_labels() -> None:
    proxy, large, small, confidence = pool()
    labels = np.where(large, "a", "b")
    with pytest.raises(EstimateError, match="proxy_answers"):
        measure_cascade_shares(QualityTarget(), "classify", proxy, labels, labels, confidence)
    sure = np.clip(
        proxy + 0.6, 0.0, 1.0
    )  # a softmax confidence >= 0.9 on most rows: the embedding gets half the budget
    embedding, by_small = measure_cascade_shares(
        QualityTarget(), "classify", sure, labels, np.where(small, "a", "b"), confidence, proxy_answers=labels
    )
    assert embedding.value > 0.0 and 0.0 <= by_small.value <= 1.0


def test_shares_need_one_answer_per_row() -> None:
    proxy, large, small, confidence = pool()
    with pytest.raises(EstimateError, match="one proxy"):
        measure_cascade_shares(QualityTarget(), "filter", proxy, large[:-1], small, confidence)
