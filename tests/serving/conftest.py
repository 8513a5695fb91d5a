"""Fixtures for the simulated model tier: a small synthetic labelled table and its simulator."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from semray.serving.simulator import ModelProfile, Simulator, SimulatorConfig, TaskSpec

MEDICAL_DIR = Path("/work/shared/data/medical")
_WORDS = [
    "battery",
    "screen",
    "camera",
    "delivery",
    "price",
    "quality",
    "sound",
    "keyboard",
    "charger",
    "warranty",
    "color",
    "weight",
    "speaker",
    "design",
    "support",
    "refund",
    "package",
    "manual",
    "cable",
    "button",
    "software",
    "update",
    "display",
    "signal",
    "travel",
    "kitchen",
    "garden",
    "office",
    "morning",
    "evening",
    "weekend",
    "holiday",
    "friend",
    "family",
    "gift",
    "colleague",
]
_CITIES = ("Lyon", "Oslo", "Quito", "Perth", "Accra")
_SENTIMENTS = ("negative", "neutral", "positive")


def review_table(rows: int = 40, seed: int = 0) -> pa.Table:
    """Distinct synthetic reviews with labels for every task kind."""
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(_WORDS) for _ in range(24)) + "." for _ in range(rows)]
    stars = [rng.randint(1, 5) for _ in range(rows)]
    return pa.table(
        {
            "review_id": [f"r{i}" for i in range(rows)],
            "review": texts,
            "stars": stars,
            "sentiment": [_SENTIMENTS[0 if s <= 2 else 1 if s == 3 else 2] for s in stars],
            "is_positive": [s >= 4 for s in stars],
            "city": [rng.choice(_CITIES) for _ in range(rows)],
            "buyer_age": [rng.randint(18, 80) for _ in range(rows)],
            "summary": [f"summary of review {i}" for i in range(rows)],
        }
    )


REVIEW_TASKS = (
    TaskSpec(name="positive", kind="filter", label_column="is_positive", keywords=("positive", "happy")),
    TaskSpec(name="sentiment", kind="label", label_column="sentiment", keywords=("sentiment",)),
    TaskSpec(name="stars", kind="score", label_column="stars", keywords=("stars", "rate"), score_range=(1, 5)),
    TaskSpec(
        name="buyer",
        kind="extract",
        fields={"city": "city", "age": "buyer_age"},
        keywords=("extract", "buyer"),
    ),
    TaskSpec(name="same_city", kind="pair", label_column="city", keywords=("same city",)),
    TaskSpec(name="summary", kind="free_text", label_column="summary", keywords=("summarize",)),
)

MODELS = {
    "sim-small": ModelProfile(error_rate=0.3, context_length=400, price_in_per_million=1.0, price_out_per_million=2.0),
    "sim-large": ModelProfile(error_rate=0.0, context_length=4096),
}


@pytest.fixture(scope="session")
def reviews() -> pa.Table:
    return review_table()


@pytest.fixture(scope="session")
def review_config(reviews: pa.Table) -> SimulatorConfig:
    return SimulatorConfig.from_labels(
        reviews,
        dataset="reviews",
        key_column="review_id",
        text_columns=["review"],
        tasks=REVIEW_TASKS,
        models=MODELS,
        seed=11,
    )


@pytest.fixture()
def simulator(review_config: SimulatorConfig) -> Simulator:
    return Simulator(review_config)


@pytest.fixture(scope="session")
def medical_dir() -> Path:
    if not (MEDICAL_DIR / "text_symptoms_data.csv").exists():
        pytest.skip(f"real medical data not found at {MEDICAL_DIR} (shared test data); skipping real-data test")
    return MEDICAL_DIR
