"""Cascades end to end on a local Ray: the demo reviews, a simulated small tier that is wrong on
15% of rows, a large tier that is always right (so its answers are the ground truth here).

Each run must meet its target against the large tier, ask the large tier about fewer rows
than the input has, and pay for each row at most once per tier (the calibration sample's
large answers are reused in the output, not asked again).
"""

from __future__ import annotations

import math
import re

import pyarrow as pa
import pytest

from semray.api import Query, from_arrow
from semray.demo.corpus import generate
from semray.demo.models import demo_serving
from semray.operators.semantic import QualityTarget
from semray.serving.simulator.config import ModelProfile
from semray.settings import Settings
from semray.transactions import show_run

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # minutes on 2 cores: `make test-slow` (CI runs it)

ROWS = 600
MODELS = {"sim-small": ModelProfile(error_rate=0.15), "sim-large": ModelProfile(error_rate=0.0)}


@pytest.fixture(scope="module")
def reviews(ray_settings: Settings) -> tuple[Query, dict[str, str]]:
    corpus = generate(ROWS, seed=3)
    serving = demo_serving(corpus, models=MODELS).model_copy(update={"cache_enabled": False})
    # The simulated tiers answer at once, so a cascade is projected slower than the large tier alone
    # (its proxy pass embeds every row first): these tests ask for cascades whatever the wall time.
    settings = ray_settings.model_copy(update={"cascade_max_slowdown": math.inf})
    query = from_arrow(corpus.reviews.select(["review_id", "review"]), settings=settings).with_serving(serving)
    truth = dict(
        zip(corpus.labels.column("review_id").to_pylist(), corpus.labels.column("sentiment").to_pylist(), strict=True)
    )
    return query, truth


def _operators(settings: Settings, run_id: str) -> dict[str, object]:
    detail = show_run(settings, run_id)
    return {operator.operator_key.partition(":")[2] or "large": operator for operator in detail.operators}


def _paid_once(settings: Settings, run_id: str) -> dict[str, object]:
    operators = _operators(settings, run_id)
    large, small = operators["large"], operators["small"]
    assert 0 < large.rows_in < ROWS, "the cascade must spare the large tier some rows"  # type: ignore[attr-defined]
    # Identical review texts in one batch share a call, so calls can be fewer than rows.
    assert large.usage.calls <= large.rows_in, "each row the large tier answered was paid once"  # type: ignore[attr-defined]
    assert small.usage.calls <= small.rows_in <= ROWS  # type: ignore[attr-defined]
    assert "calibration" in operators, "the calibration draws and thresholds are journaled"
    return operators


def test_cascaded_filter_meets_accuracy(reviews: tuple[Query, dict[str, str]], ray_settings: Settings) -> None:
    query, truth = reviews
    cascaded = query.sem_filter("{review} is positive", quality=0.9, diagnostics=True)
    result = cascaded.execute()
    explained = cascaded.explain(result)
    # The cascade is the root: its actual line has the rows returned, then what it paid.
    assert re.search(rf"actual: rows {result.table.num_rows} · calls \S+", explained), explained
    assert f"Actual total: {result.usage.calls} model calls" in explained, explained
    kept = set(result.table.column("review_id").to_pylist())
    accuracy = sum((row in kept) == (label == "positive") for row, label in truth.items()) / len(truth)
    assert accuracy >= 0.9
    assert set(result.table.column("_tier").to_pylist()) <= {"embedding", "small", "large"}
    _paid_once(ray_settings, result.run_id)


def test_cascaded_classification_meets_accuracy(reviews: tuple[Query, dict[str, str]], ray_settings: Settings) -> None:
    query, truth = reviews
    result = query.sem_classify(
        "the sentiment of {review}", "positive|negative|neutral", output="sentiment", quality=0.9, diagnostics=True
    ).execute()
    table = result.table
    assert table.num_rows == ROWS
    right = sum(
        truth[row] == label
        for row, label in zip(table.column("review_id").to_pylist(), table.column("sentiment").to_pylist(), strict=True)
    )
    assert right / ROWS >= 0.9
    tiers = pa.compute.value_counts(table.column("_tier")).to_pylist()
    assert {entry["values"] for entry in tiers} - {"large"}, f"only the large tier answered: {tiers}"
    _paid_once(ray_settings, result.run_id)


def test_recall_target_keeps_most_positives_and_verifies_what_it_keeps(
    reviews: tuple[Query, dict[str, str]], ray_settings: Settings
) -> None:
    query, truth = reviews
    target = QualityTarget(metric="recall", level=0.9, delta=0.05)
    result = query.sem_filter("{review} is positive", diagnostics=True).with_quality(target).execute()
    kept = set(result.table.column("review_id").to_pylist())
    positives = {row for row, label in truth.items() if label == "positive"}
    assert len(kept & positives) / len(positives) >= 0.9
    assert kept <= positives, "every kept row was verified by the large tier"
    assert set(result.table.column("_tier").to_pylist()) == {"large"}
    assert "small" not in _operators(ray_settings, result.run_id)
