"""The project's own demo corpus: product reviews with structured columns and known labels.

Every review is composed from phrases whose meaning is known, so each row carries its
true sentiment, aspect, and whether it mentions delivery — ground truth for semantic
queries on the simulated tiers. Deterministic for a given seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

PRODUCTS: tuple[tuple[str, str, str, float], ...] = (
    ("Aurora Desk Lamp", "home", "Lumen", 39.0),
    ("Breeze Tower Fan", "home", "Airly", 59.0),
    ("Cobalt Chef Knife", "kitchen", "Edgeworks", 79.0),
    ("Drift Pour-Over Kettle", "kitchen", "Brewline", 45.0),
    ("Echo Wireless Earbuds", "electronics", "Soundcraft", 99.0),
    ("Flux USB-C Hub", "electronics", "Portly", 35.0),
    ("Glide Running Shoes", "sports", "Stride", 120.0),
    ("Harbor Rain Jacket", "outdoor", "Northway", 150.0),
    ("Ion Smart Watch", "electronics", "Tickr", 199.0),
    ("Juniper Yoga Mat", "sports", "Stride", 29.0),
    ("Kestrel Hiking Backpack", "outdoor", "Northway", 110.0),
    ("Lark Espresso Grinder", "kitchen", "Brewline", 140.0),
)

ASPECTS = ("quality", "price", "delivery", "support")

PHRASES: dict[tuple[str, str], tuple[str, ...]] = {
    ("quality", "positive"): (
        "The build quality is excellent and it feels like it will last for years.",
        "Solid materials, careful finish, and it works exactly as described.",
        "It is sturdy and well made; I use it every day without a problem.",
    ),
    ("quality", "negative"): (
        "It broke after two weeks and the plastic feels cheap.",
        "The finish started peeling almost immediately and a part snapped.",
        "Poorly made: it stopped working after a few uses.",
    ),
    ("quality", "neutral"): (
        "The quality is about what you would expect, nothing special.",
        "It does the job, though the materials are ordinary.",
    ),
    ("price", "positive"): (
        "Great value for the money; cheaper than the alternatives I looked at.",
        "For this price it is a bargain and I would buy it again.",
    ),
    ("price", "negative"): (
        "Far too expensive for what you get; I feel overcharged.",
        "The price is hard to justify when cheaper options do the same.",
    ),
    ("price", "neutral"): (
        "The price is fair, neither a deal nor a rip-off.",
        "It costs about the same as similar products.",
    ),
    ("delivery", "positive"): (
        "Shipping was fast and it arrived two days early in perfect packaging.",
        "The courier delivered it the next morning, well packed.",
    ),
    ("delivery", "negative"): (
        "The package arrived a week late and the box was crushed.",
        "Delivery was a mess: lost once, then dropped at the wrong address.",
    ),
    ("delivery", "neutral"): (
        "It arrived within the promised delivery window.",
        "Shipping took the usual five days.",
    ),
    ("support", "positive"): (
        "Customer support answered within an hour and solved my issue.",
        "The help desk was friendly and replaced a faulty part for free.",
    ),
    ("support", "negative"): (
        "Customer service ignored my emails for weeks.",
        "Support was rude and refused to honour the warranty.",
    ),
    ("support", "neutral"): (
        "I contacted support once and got a standard reply.",
        "The support page had the answer, eventually.",
    ),
}

OPENERS = ("I bought the {product} last month.", "Review of the {product}.", "My thoughts on the {product}:", "")
RATINGS = {"positive": (4, 5), "neutral": (3, 3), "negative": (1, 2)}


@dataclass(frozen=True, slots=True)
class DemoCorpus:
    reviews: pa.Table
    products: pa.Table
    labels: pa.Table


def generate(rows: int = 400, seed: int = 7) -> DemoCorpus:
    """Generate the demo corpus, e.g. ``generate(400).reviews.num_rows == 400``."""
    rng = random.Random(seed)
    reviews: dict[str, list[object]] = {
        k: [] for k in ("review_id", "product", "rating", "verified", "review_date", "review")
    }
    labels: dict[str, list[object]] = {k: [] for k in ("review_id", "sentiment", "aspect", "mentions_delivery")}
    for index in range(rows):
        product = rng.choice(PRODUCTS)[0]
        sentiment = rng.choices(("positive", "negative", "neutral"), weights=(5, 3, 2))[0]
        aspect = rng.choice(ASPECTS)
        opener = rng.choice(OPENERS).format(product=product)
        body = rng.choice(PHRASES[(aspect, sentiment)])
        review_id = f"R{index:05d}"
        reviews["review_id"].append(review_id)
        reviews["product"].append(product)
        reviews["rating"].append(rng.randint(*RATINGS[sentiment]))
        reviews["verified"].append(rng.random() < 0.8)
        reviews["review_date"].append(f"2026-{1 + index % 12:02d}-{1 + index % 28:02d}")
        reviews["review"].append(f"{opener} {body}".strip())
        labels["review_id"].append(review_id)
        labels["sentiment"].append(sentiment)
        labels["aspect"].append(aspect)
        labels["mentions_delivery"].append(aspect == "delivery")
    products = pa.table(
        {
            "product": [p[0] for p in PRODUCTS],
            "category": [p[1] for p in PRODUCTS],
            "brand": [p[2] for p in PRODUCTS],
            "list_price": [p[3] for p in PRODUCTS],
        }
    )
    return DemoCorpus(reviews=pa.table(reviews), products=products, labels=pa.table(labels))


def write(folder: Path, rows: int = 400, seed: int = 7) -> dict[str, Path]:
    """Write reviews.csv, products.csv and labels.csv into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    corpus = generate(rows, seed)
    paths = {}
    for name, table in (("reviews", corpus.reviews), ("products", corpus.products), ("labels", corpus.labels)):
        path = folder / f"{name}.csv"
        pacsv.write_csv(table, path)
        paths[name] = path
    return paths
