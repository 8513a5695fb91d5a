"""The queries ``semray demo`` runs over the demo corpus."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from semray.api import Query, read_csv
from semray.demo.corpus import write
from semray.settings import Settings


@dataclass(frozen=True, slots=True)
class DemoQuery:
    title: str
    build: Callable[[Query, Query], Query]


DEMO_QUERIES: tuple[DemoQuery, ...] = (
    DemoQuery(
        "Average rating and review count per category (join + group-by + sort)",
        lambda reviews, products: reviews.join(products, "l.product = r.product")
        .aggregate(by="category", reviews="count(*)", avg_rating="round(avg(rating), 2)")
        .sort("avg_rating", descending=True),
    ),
    DemoQuery(
        "Lowest-rated verified reviews that talk about delivery (filter + project + limit)",
        lambda reviews, products: reviews.filter("verified AND rating <= 2 AND review ILIKE '%deliver%'")
        .select("review_id", "product", "rating", "review")
        .sort("review_id")
        .limit(5),
    ),
    DemoQuery(
        "Brands whose products average under 3 stars (join + group-by + having)",
        lambda reviews, products: reviews.join(products, "l.product = r.product")
        .aggregate(by="brand", avg_rating="avg(rating)", reviews="count(*)")
        .filter("avg_rating < 3.3")
        .sort("avg_rating"),
    ),
)


def demo_sources(settings: Settings, rows: int = 400) -> tuple[Query, Query]:
    """Write the corpus under the state folder (if absent) and return (reviews, products)."""
    folder = settings.state_path / "demo"
    if not (folder / "reviews.csv").exists():
        write(folder, rows)
    return read_csv(folder / "reviews.csv", settings), read_csv(folder / "products.csv", settings)
