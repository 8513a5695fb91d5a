"""estimate_plan: rows, tokens, dollars, GPU-seconds, latency and quality by the documented formulas."""

from __future__ import annotations

import math

import pytest
from plans import PLAN, POSITIVE, PROFILES, RATED, SCAN, STATISTICS, TOPIC

from semray.cost_model.estimates import Interval
from semray.cost_model.plan_cost import ESTIMATORS, MissingStatisticsError, estimate_plan
from semray.cost_model.statistics import PlanStatistics
from semray.cost_model.tokens import expected_output_tokens
from semray.operators import OPERATORS, Join, Scan, SemAgg, SemJoin, SemSearch, SemTopK, Union
from semray.operators.keys import statistics_key
from semray.operators.plan_paths import operator_paths


def test_every_operator_has_a_cost_estimator() -> None:
    estimate_plan(SCAN, STATISTICS, PROFILES)  # loads the registry
    assert [op.__name__ for op in OPERATORS if op not in ESTIMATORS] == []


def test_paths_name_nodes_from_the_root() -> None:
    paths = operator_paths(PLAN)
    assert paths[""] is PLAN and paths["input.input"] is POSITIVE and paths["input.input.input.input"] is SCAN


def test_rows_follow_the_selectivities_and_their_intervals() -> None:
    estimate = estimate_plan(PLAN, STATISTICS, PROFILES)
    assert [op.path for op in estimate.operators] == [
        "input.input.input.input",
        "input.input.input",
        "input.input",
        "input",
        "",
    ]
    positive = estimate.operator("input.input")
    assert positive.rows_in == Interval(5000.0, 4500.0, 5500.0)
    assert positive.rows_out.value == pytest.approx(2000.0)
    assert (positive.rows_out.low, positive.rows_out.high) == pytest.approx((1350.0, 2750.0))
    assert estimate.rows.value == pytest.approx(2000.0)
    relational = estimate.operator("input.input.input")
    assert relational.tier == "none" and relational.dollars == Interval.exact(0.0)


def test_dollars_gpu_seconds_and_latency_by_the_formulas() -> None:
    estimate = estimate_plan(PLAN, STATISTICS, PROFILES)
    positive, topic = estimate.operator("input.input"), estimate.operator("input")
    assert positive.tier == "small" and topic.tier == "large"  # auto is priced as the top tier
    assert positive.dollars.value == pytest.approx(5000 * (100 * 0.1 + 1 * 0.4) / 1e6)
    assert positive.dollars.high == pytest.approx(5500 * (110 * 0.1 + 1 * 0.4) / 1e6)
    out = expected_output_tokens(TOPIC)
    tokens = 2000 * (120 + out)
    gpu = tokens / 1000 * 0.5
    assert topic.gpu_seconds.value == pytest.approx(gpu)
    assert topic.dollars.value == pytest.approx(2000 * (120 * 2.5 + out * 10.0) / 1e6 + gpu * 4.0 / 3600)
    assert topic.latency_s.value == pytest.approx((2000 * 0.1 + tokens / 500) / 8)
    assert estimate.dollars.value == pytest.approx(positive.dollars.value + topic.dollars.value)
    assert estimate.dollars.low <= estimate.dollars.value <= estimate.dollars.high


def test_quality_is_the_union_bound_and_tier_overrides_change_it() -> None:
    default = estimate_plan(PLAN, STATISTICS, PROFILES)
    assert default.quality == pytest.approx(0.92)
    cheap = estimate_plan(PLAN, STATISTICS, PROFILES, {"input": "small"})
    assert cheap.quality == pytest.approx(1 - 0.08 - 0.15)
    assert cheap.dollars.value < default.dollars.value
    best = estimate_plan(PLAN, STATISTICS, PROFILES, {"input.input": "large"})
    assert best.quality == 1.0 and best.tiers == {"input.input": "large", "input": "large"}


def test_strict_estimates_name_the_missing_figure_and_what_to_measure() -> None:
    no_selectivity = PlanStatistics(source_rows=STATISTICS.source_rows, tokens_per_row=STATISTICS.tokens_per_row)
    with pytest.raises(MissingStatisticsError, match=r"for Filter rating >= 4 .*relational\.filter_selectivity"):
        estimate_plan(PLAN, no_selectivity, PROFILES, strict=True)
    relational_only = no_selectivity.merged(
        PlanStatistics(selectivity={statistics_key(RATED): STATISTICS.selectivity[statistics_key(RATED)]})
    )
    with pytest.raises(MissingStatisticsError, match=r"no selectivity measured for SemFilter.*measure_statistics"):
        estimate_plan(PLAN, relational_only, PROFILES, strict=True)
    with pytest.raises(MissingStatisticsError, match=r"no row count for source 'csv:reviews\.csv'"):
        estimate_plan(PLAN, PlanStatistics(), PROFILES, strict=True)
    no_quality = PlanStatistics(
        source_rows=STATISTICS.source_rows, selectivity=STATISTICS.selectivity, tokens_per_row=STATISTICS.tokens_per_row
    )
    with pytest.raises(MissingStatisticsError, match="no quality of tier 'small'"):
        estimate_plan(PLAN, no_quality, PROFILES, strict=True)
    fallback = no_quality.merged(PlanStatistics(default_tier_quality={"small": 0.9}))
    assert estimate_plan(PLAN, fallback, PROFILES, strict=True).quality == pytest.approx(0.9)
    with pytest.raises(MissingStatisticsError, match="no price profile for tier 'large'"):
        estimate_plan(PLAN, STATISTICS, {"small": PROFILES["small"]})


def test_without_measurements_defaults_are_used_and_noted() -> None:
    estimate = estimate_plan(PLAN, PlanStatistics(), PROFILES)
    assert estimate.assumed == {
        "input.input.input.input": ("source_rows",),
        "input.input.input": ("selectivity",),
        "input.input": ("selectivity", "tokens_per_row", "tier_quality"),
        "input": ("tokens_per_row",),
    }
    assert estimate.quality == 0.0  # an uncalibrated cheaper tier guarantees nothing
    positive = estimate.operator("input.input")
    assert positive.rows_out.value == pytest.approx(10_000 / 3 * 0.5) and math.isinf(estimate.dollars.high)
    assert positive.input_tokens.value > positive.rows_in.value * 100  # the prompt's fixed text + one cell
    assert estimate_plan(PLAN, STATISTICS, PROFILES).assumed == {}


def test_an_unmeasured_relational_filter_gets_the_system_r_default() -> None:
    statistics = PlanStatistics(source_rows=STATISTICS.source_rows)
    estimate = estimate_plan(RATED, statistics, PROFILES)
    assert estimate.rows.value == pytest.approx(10_000 / 3)
    assert (estimate.rows.low, estimate.rows.high) == (0.0, 10_000.0)


def test_joins_unions_and_set_level_semantic_operators() -> None:
    left = Scan(source=SCAN.source, source_schema=SCAN.source_schema)
    other = Scan(source=SCAN.source.model_copy(update={"path": "other.csv"}), source_schema=SCAN.source_schema)
    rows = {"csv:reviews.csv": Interval.exact(100), "csv:other.csv": Interval.exact(50)}
    pairs = SemJoin(left=left, right=other, instruction="{l.review} and {r.review} agree")
    agg = SemAgg(input=left, instruction="summarise {review}")
    topk = SemTopK(input=left, instruction="most useful {review}", k=5)
    search = SemSearch(input=left, column="review", query="battery", k=7)
    statistics = PlanStatistics(
        source_rows=rows,
        selectivity={statistics_key(pairs): Interval(0.01, 0.0, 0.02)},
        tokens_per_row={statistics_key(n): Interval.exact(50) for n in (pairs, agg, topk, search)},
    )
    join = estimate_plan(pairs, statistics, PROFILES)
    assert join.operator("").rows_in.value == 5000 and join.rows.value == pytest.approx(50)
    assert estimate_plan(agg, statistics, PROFILES).rows == Interval.exact(1.0)
    assert estimate_plan(topk, statistics, PROFILES).rows.value == 5
    embedding = {"embedding": PROFILES["small"]}
    assert estimate_plan(search, statistics, embedding).operator("").tier == "embedding"
    union = estimate_plan(Union(inputs=(left, other)), statistics, PROFILES)
    assert union.rows == Interval.exact(150)
    inner = estimate_plan(Join(left=left, right=other, on="l.rating = r.rating"), statistics, PROFILES)
    assert inner.rows.value == 100 and inner.rows.high == 5000
    assert not math.isnan(inner.latency_s.value)
