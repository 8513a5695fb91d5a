"""Model tiers for the demo: the simulator, answering from the demo corpus's labels."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa

from semray.demo.corpus import ASPECTS, DemoCorpus
from semray.serving.config import ServingConfig
from semray.serving.simulator.config import DatasetSpec, ModelProfile, SimulatorConfig, TaskSpec

DEMO_TASKS = (
    TaskSpec(
        name="positive", kind="filter", label_column="sentiment", true_values=("positive",), keywords=("positive",)
    ),
    TaskSpec(
        name="delivery",
        kind="filter",
        label_column="mentions_delivery",
        true_values=("true",),
        keywords=("delivery", "shipping"),
    ),
    TaskSpec(
        name="sentiment",
        kind="label",
        label_column="sentiment",
        choices=("positive", "negative", "neutral"),
        keywords=("sentiment",),
    ),
    TaskSpec(name="aspect", kind="label", label_column="aspect", choices=ASPECTS, keywords=("aspect",)),
)


def demo_serving(corpus: DemoCorpus, models: Mapping[str, ModelProfile] | None = None, seed: int = 0) -> ServingConfig:
    """Simulated small and large tiers whose ground truth is the demo corpus's labels."""
    labels = corpus.labels.set_column(
        corpus.labels.schema.get_field_index("mentions_delivery"),
        "mentions_delivery",
        pa.array(["true" if v else "false" for v in corpus.labels.column("mentions_delivery").to_pylist()]),
    )
    table = corpus.reviews.select(["review_id", "review"]).join(labels, "review_id")
    simulator = SimulatorConfig.from_labels(
        table,
        key_column="review_id",
        text_columns=["review"],
        tasks=DEMO_TASKS,
        dataset="reviews",
        models=models,
        seed=seed,
    )
    return ServingConfig(simulator=simulator)


def file_serving(data: Path, profile: ModelProfile, app_prefix: str) -> ServingConfig:
    """Simulated tiers (both ``profile``) over the demo corpus written to ``data`` (``corpus.write``),
    with the response cache off: a path-based config, so a run's journal can rebuild it on resume.
    """
    reviews = DatasetSpec(
        key_column="review_id", text_columns=("review",), path=data / "reviews.csv", labels_path=data / "labels.csv"
    )
    simulator = SimulatorConfig.model_validate(
        {"datasets": {"reviews": reviews}, "tasks": DEMO_TASKS, "models": {"sim-small": profile, "sim-large": profile}}
    )
    return ServingConfig(cache_enabled=False, simulator=simulator, app_prefix=app_prefix)
