"""The reviews workload's data: generated product reviews with labels, instructions, simulator tasks, truth.

Every review is a unique string of nonsense words (so the simulator tells each row apart) with
labels drawn per row by a seeded generator: ``complaint`` (about 60% true), ``shipping``
(about 60%, independent, so the chain of both keeps about 36%), a ``family`` among
`FAMILIES`, a ``category`` among `CATEGORIES` (whose descriptions are the right side of the
category join), a ``mood`` and ``stars`` 1-5, and a plain ``brand`` column the SQL groups by.
The instructions are this workload's own wording; the simulator recognises them by their
keywords (``TaskSpec.keywords``) and answers from the labels.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.harness.texts import nonsense_texts
from benchmarks.workloads.definitions import PreparedWorkload, model_profiles
from semray.serving.simulator.config import SimulatorConfig, TaskSpec

FAMILIES = ("headphones", "kettle", "robot vacuum", "smartwatch", "blender", "e-reader", "drone", "air purifier")
BRANDS = ("Aldera", "Brixon", "Cavo", "Dunmore")
MOODS = ("positive", "neutral", "negative")
CATEGORIES = {
    "battery": "trouble with the battery, charging or how long the device runs on one charge",
    "build": "the build quality, materials, finish or how sturdy the device feels in the hand",
    "setup": "getting the device set up, paired with a phone or connected to the home network",
    "noise": "how loud the device is while it works and whether the noise is bothersome",
    "value": "whether the price paid was fair for what the device offers compared with others",
}
"""Category name -> the description the category join reads (long enough for the simulator to match)."""

INSTRUCTIONS = {
    "complaint": (
        "Here is what a customer wrote after buying something from us. "
        "Does the customer complain about a fault or a letdown? Answer yes or no."
    ),
    "shipping": "Does this customer review bring up the parcel delivery or its packaging at any point?",
    "same_family": (
        "You are shown two customer reviews. The first one reads: {l.text}. The second one reads: {r.text}. "
        "Reply yes when both were written about the same device family, and no otherwise."
    ),
    "category": (
        "A customer review: {l.text}\nA review topic: {r.description}\nIs the review chiefly concerned with this topic?"
    ),
    "mood": "The overall mood of the customer who wrote this review",
    "stars": "How many stars would the writer of this review give the product",
}
"""The wording every system is given; ``{text}`` cells are added by each runner where it needs them."""

TASK_KEYWORDS = {
    "complaint": ("complain about a fault",),
    "shipping": ("parcel delivery",),
    "same_family": ("device family",),
    "category": ("chiefly concerned",),
    "mood": ("overall mood",),
    "stars": ("how many stars",),
}


def generated_reviews(rows: int, seed: int) -> list[dict[str, Any]]:
    """``rows`` reviews with their labels; the same ``seed`` gives the same reviews.

    >>> sorted(generated_reviews(1, seed=1)[0])
    ['brand', 'category', 'complaint', 'family', 'mood', 'review_id', 'shipping', 'stars', 'text']
    """
    rng = random.Random(seed)
    texts = nonsense_texts(rows, 10, rng)
    reviews = []
    for index, text in enumerate(texts):
        complaint = rng.random() < 0.6
        stars = rng.choice((1, 2, 3)) if complaint else rng.choice((3, 4, 5))
        mood = "negative" if stars <= 2 else "neutral" if stars == 3 else "positive"
        reviews.append(
            {
                "review_id": f"R{index:05d}",
                "text": text,
                "brand": rng.choice(BRANDS),
                "complaint": "true" if complaint else "false",
                "shipping": "true" if rng.random() < 0.6 else "false",
                "family": rng.choice(FAMILIES),
                "category": CATEGORIES[rng.choice(sorted(CATEGORIES))],
                "mood": mood,
                "stars": stars,
            }
        )
    return reviews


def simulator_config(reviews: list[dict[str, Any]], seed: int, latency_scale: float) -> SimulatorConfig:
    """Two datasets (the reviews, the category descriptions) and one task per instruction.

    Pair tasks come before the label tasks that share their keywords: a prompt quoting two
    rows is the pair question, one quoting a single review the per-row one (a factorized
    join's side); the right-labels classification also says "holds", which only its label task
    counts.
    """
    categories = pa.table({"category": sorted(CATEGORIES), "description": [CATEGORIES[c] for c in sorted(CATEGORIES)]})
    tasks = (
        TaskSpec(
            name="complaint",
            kind="filter",
            dataset="reviews",
            label_column="complaint",
            true_values=("true",),
            keywords=TASK_KEYWORDS["complaint"],
        ),
        TaskSpec(
            name="shipping",
            kind="filter",
            dataset="reviews",
            label_column="shipping",
            true_values=("true",),
            keywords=TASK_KEYWORDS["shipping"],
        ),
        TaskSpec(
            name="same_family",
            kind="pair",
            dataset="reviews",
            label_column="family",
            keywords=TASK_KEYWORDS["same_family"],
        ),
        TaskSpec(
            name="family",
            kind="label",
            dataset="reviews",
            label_column="family",
            choices=FAMILIES,
            keywords=TASK_KEYWORDS["same_family"],
        ),
        TaskSpec(
            name="in_category",
            kind="pair",
            dataset="reviews",
            label_column="category",
            right_dataset="categories",
            right_label_column="description",
            keywords=TASK_KEYWORDS["category"],
        ),
        TaskSpec(
            name="category",
            kind="label",
            dataset="reviews",
            label_column="category",
            choices=tuple(CATEGORIES[c] for c in sorted(CATEGORIES)),
            keywords=(*TASK_KEYWORDS["category"], "holds"),
        ),
        TaskSpec(
            name="mood",
            kind="label",
            dataset="reviews",
            label_column="mood",
            choices=MOODS,
            keywords=TASK_KEYWORDS["mood"],
        ),
        TaskSpec(name="stars", kind="score", dataset="reviews", label_column="stars", keywords=TASK_KEYWORDS["stars"]),
    )
    table = pa.Table.from_pylist(reviews)
    return SimulatorConfig.from_mapping(
        {
            "seed": seed,
            "datasets": {
                "reviews": {"key_column": "review_id", "text_columns": ("text",), "table": table},
                "categories": {"key_column": "category", "text_columns": ("description",), "table": categories},
            },
            "tasks": tasks,
            "models": model_profiles(latency_scale),
        },
        source="reviews",
    )


def prepare_reviews(
    out: Path, seed: int, latency_scale: float, rows: int, join_rows: int, category_rows: int, sql_rows: int
) -> PreparedWorkload:
    """Write the inputs (all reviews; the self-join's, category join's and SQL's first rows; the
    categories), the simulator config and the truth every system is scored against."""
    reviews = generated_reviews(rows, seed)
    out.mkdir(parents=True, exist_ok=True)
    columns = ("review_id", "text", "brand")
    inputs = {
        "reviews": reviews,
        "join_sample": reviews[:join_rows],
        "category_sample": reviews[:category_rows],
        "sql_sample": reviews[:sql_rows],
    }
    paths = {}
    for name, chosen in inputs.items():
        paths[name] = str(out / f"{name}.jsonl")
        _write_jsonl(Path(paths[name]), [{key: review[key] for key in columns} for review in chosen])
    paths["categories"] = str(out / "categories.jsonl")
    _write_jsonl(Path(paths["categories"]), [{"description": CATEGORIES[c]} for c in sorted(CATEGORIES)])
    config_path = simulator_config(reviews, seed, latency_scale).save(out / "simulator.json")
    spec = {
        "workload": "reviews",
        "inputs": paths,
        "instructions": INSTRUCTIONS,
        "moods": list(MOODS),
    }
    return PreparedWorkload("reviews", config_path, spec, reviews_truth(reviews, join_rows, category_rows, sql_rows))


def reviews_truth(reviews: list[dict[str, Any]], join_rows: int, category_rows: int, sql_rows: int) -> dict[str, Any]:
    """What each query should return, from the labels.

    >>> truth = reviews_truth(generated_reviews(40, seed=2), 10, 10, 10)
    >>> sorted(truth)[:4]
    ['brand_complaint_share', 'brand_stars', 'category_pairs', 'complaint']
    """
    complaint = sorted(r["review_id"] for r in reviews if r["complaint"] == "true")
    shipping = {r["review_id"] for r in reviews if r["shipping"] == "true"}
    sample = reviews[:join_rows]
    same = sorted(
        [a["review_id"], b["review_id"]]
        for i, a in enumerate(sample)
        for b in sample[i + 1 :]
        if a["family"] == b["family"]
    )
    sql = reviews[:sql_rows]
    by_brand: dict[str, list[dict[str, Any]]] = {}
    for review in sql:
        by_brand.setdefault(review["brand"], []).append(review)
    return {
        "rows": len(reviews),
        "complaint": complaint,
        "complaint_and_shipping": sorted(set(complaint) & shipping),
        "same_family_pairs": same,
        "join_rows": join_rows,
        "category_pairs": sorted([r["review_id"], r["category"]] for r in reviews[:category_rows]),
        "brand_complaint_share": {
            brand: round(sum(r["complaint"] == "true" for r in group) / len(group), 4)
            for brand, group in sorted(by_brand.items())
        },
        "brand_stars": {
            brand: round(sum(r["stars"] for r in group) / len(group), 4) for brand, group in sorted(by_brand.items())
        },
        "mood_counts": dict(sorted(Counter(r["mood"] for r in sql).items())),
    }


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
