"""The queries ``semray demo`` runs over the demo corpus."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from semray.demo.corpus import generate, write
from semray.demo.models import demo_serving
from semray.query import Query
from semray.readers import read_csv
from semray.serving.profiles import resolve_serving
from semray.settings import Settings


@dataclass(frozen=True, slots=True)
class DemoQuery:
    title: str
    build: Callable[[Query, Query], Query]


DEMO_QUERIES: tuple[DemoQuery, ...] = (
    DemoQuery(
        "Average rating and review count per category (join + group-by + sort)",
        lambda reviews, products: (
            reviews.join(products, "l.product = r.product")
            .aggregate(by="category", reviews="count(*)", avg_rating="round(avg(rating), 2)")
            .sort("avg_rating", descending=True)
        ),
    ),
    DemoQuery(
        "Lowest-rated verified reviews that mention delivery in words (filter + project + limit)",
        lambda reviews, products: (
            reviews.filter("verified AND rating <= 2 AND review ILIKE '%deliver%'")
            .select("review_id", "product", "rating", "review")
            .sort("review_id")
            .limit(5)
        ),
    ),
    DemoQuery(
        "Reviews complaining about delivery, however they say it (semantic filter + limit)",
        lambda reviews, products: (
            reviews.filter("rating <= 2")
            .sem_filter("{review} talks about delivery or shipping")
            .select("review_id", "product", "review")
            .limit(5)
        ),
    ),
    DemoQuery(
        "What each category's reviews are about (semantic classify + group-by)",
        lambda reviews, products: (
            reviews.join(products, "l.product = r.product")
            .sem_classify(
                "the aspect of the product this review is about: {review}",
                "quality|price|delivery|support",
                output="aspect",
            )
            .aggregate(by=["category", "aspect"], reviews="count(*)")
            .sort("category", "reviews", descending=[False, True])
        ),
    ),
)


def demo_sources(settings: Settings, rows: int = 400) -> tuple[Query, Query]:
    """Write the corpus under the state folder (if absent) and return (reviews, products)
    whose semantic operators run on the model profile's tiers (``Settings.models``,
    ``./semray.toml``); its simulated tiers, the defaults, answer from the corpus labels."""
    folder = settings.state_path / "demo" / f"rows-{rows}"
    if not (folder / "reviews.csv").exists():
        write(folder, rows)
    profile = resolve_serving(settings.models)
    labelled = demo_serving(generate(rows))
    serving = profile.model_copy(update={"simulator": labelled.simulator})
    reviews = read_csv(folder / "reviews.csv", settings).with_serving(serving)
    products = read_csv(folder / "products.csv", settings).with_serving(serving)
    return reviews, products
