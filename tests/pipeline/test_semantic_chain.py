"""A chain of semantic operators fits num_cpus=2 beside the Serve replicas (no deadlock)."""

from __future__ import annotations

import pytest

import semray
from semray.demo.corpus import generate
from semray.demo.models import demo_serving
from semray.serving.simulator.config import ModelProfile
from semray.settings import Settings

pytestmark = pytest.mark.ray


@pytest.mark.slow  # 15-50 s on 2 cores: `make test` stays under 13 minutes; CI's test-slow runs it
def test_four_semantic_operators_in_a_row(ray_settings: Settings) -> None:
    corpus = generate(60)
    exact = {"sim-small": ModelProfile(error_rate=0.0), "sim-large": ModelProfile(error_rate=0.0)}
    reviews = semray.from_arrow(corpus.reviews, "chain-reviews", settings=ray_settings).with_serving(
        demo_serving(corpus, exact)
    )
    query = (
        reviews.sem_classify("the sentiment of {review}", "positive|negative|neutral", output="sentiment")
        .sem_classify("the aspect of {review}", "quality|price|delivery|support", output="aspect")
        .sem_filter("{review} talks about delivery or shipping", tier="small")
        .sem_filter("{review} is positive")
    )
    result = query.execute()
    labels = {row["review_id"]: row for row in corpus.labels.to_pylist()}
    expected = {rid for rid, row in labels.items() if row["mentions_delivery"] and row["sentiment"] == "positive"}
    assert set(result.table.column("review_id").to_pylist()) == expected
    for row in result.table.to_pylist():
        assert row["sentiment"] == "positive" and row["aspect"] == "delivery"


@pytest.mark.slow  # 15-50 s on 2 cores: `make test` stays under 13 minutes; CI's test-slow runs it
def test_diagnostics_columns(ray_settings: Settings) -> None:
    corpus = generate(60)  # the corpus of the test above: the same tiers serve both, deployed once
    exact = {"sim-small": ModelProfile(error_rate=0.0), "sim-large": ModelProfile(error_rate=0.0)}
    reviews = semray.from_arrow(corpus.reviews, "diag-reviews", settings=ray_settings).with_serving(
        demo_serving(corpus, exact)
    )
    table = reviews.sem_classify(
        "the sentiment of {review}", "positive|negative|neutral", output="s", diagnostics=True
    ).collect()
    assert table.column_names[-4:] == ["s", "_tier", "_confidence", "_error"]
    assert set(table.column("_tier").to_pylist()) == {"large"}
    confidences = table.column("_confidence").to_pylist()
    assert all(c is not None and 0 < c <= 1 for c in confidences)
    assert table.column("_error").null_count == table.num_rows
    kept = reviews.sem_filter("{review} is positive", diagnostics=True).collect()
    assert kept.num_rows > 0 and kept.column_names[-3:] == ["_tier", "_confidence", "_error"]
