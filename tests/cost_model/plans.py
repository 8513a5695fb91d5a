"""Small plans and statistics shared by the cost-model tests."""

from __future__ import annotations

from semray.cost_model.estimates import Interval
from semray.cost_model.prices import TierProfile
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Filter, Limit, Scan, Schema, SemClassify, SemFilter, SourceSpec
from semray.operators.keys import source_key, statistics_key

SCAN = Scan(
    source=SourceSpec(kind="csv", path="reviews.csv"),
    source_schema=Schema.of(("review", "VARCHAR"), ("rating", "BIGINT")),
)
RATED = Filter(input=SCAN, predicate="rating >= 4")
POSITIVE = SemFilter(input=RATED, instruction="{review} is positive", tier="small")
TOPIC = SemClassify(input=POSITIVE, instruction="topic of {review}", labels=("price", "quality"))
PLAN = Limit(input=TOPIC, count=10_000)

PROFILES = {
    "small": TierProfile("small", 0.1, 0.4, 0.0, 1000.0, 4, latency_per_call_s=0.05),
    "large": TierProfile("large", 2.5, 10.0, 0.5, 500.0, 8, latency_per_call_s=0.1, gpu_hour=4.0),
}

STATISTICS = PlanStatistics(
    source_rows={source_key(SCAN): Interval.exact(10_000)},
    selectivity={
        statistics_key(RATED): Interval(0.5, 0.45, 0.55),
        statistics_key(POSITIVE): Interval(0.4, 0.3, 0.5),
    },
    tokens_per_row={statistics_key(POSITIVE): Interval(100, 90, 110), statistics_key(TOPIC): Interval.exact(120)},
    tier_quality={(statistics_key(POSITIVE), "small"): 0.92, (statistics_key(TOPIC), "small"): 0.85},
)
