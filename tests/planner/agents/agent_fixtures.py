"""Real files for the agent tests, a catalog view profiled from them, gold plans, recordings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from semray.cost_model.prices import TierProfile
from semray.planner.agents import RecordedAnswer, RecordedModel, SourceCatalog
from semray.planner.agents.catalog_view import DatasetProfile
from semray.planner.agents.semantic import rendered_judgement

QUESTION = "What is the average rating of each product?"
PROFILE = TierProfile("test-large", 2.0, 8.0, 0.0, float("inf"), 1)
"""$2 / $8 per million tokens: planning steps are priced with this."""


def write_data(folder: Path) -> dict[str, Path]:
    reviews = folder / "reviews.csv"
    reviews.write_text(
        "product_id,review,rating\n1,great lamp bright light,5\n2,kettle broke on day two,1\n1,works fine,4\n"
        "2,boils fast,4\n3,chair wobbles,2\n",
        encoding="utf-8",
    )
    products = folder / "products.csv"
    products.write_text("id,name,price\n1,lamp,20.5\n2,kettle,35.0\n3,chair,80.0\n", encoding="utf-8")
    weather = folder / "weather.csv"
    weather.write_text("day,city,temperature\n2024-01-01,Oslo,-3.5\n2024-01-02,Oslo,-1.0\n", encoding="utf-8")
    return {"reviews": reviews, "products": products, "weather": weather}


def catalog_of(folder: Path) -> SourceCatalog:
    return SourceCatalog.from_paths(write_data(folder))


def scan(profile: DatasetProfile) -> dict[str, Any]:
    return {
        "op": "scan",
        "source": {"kind": profile.kind, "path": profile.uri, "options": {}},
        "source_schema": {"columns": [{"name": c.name, "type": c.type} for c in profile.columns]},
    }


def gold_document(catalog: SourceCatalog, expr: str = "avg(rating)") -> dict[str, Any]:
    """Average rating per product name: join reviews to products, group by name."""
    join = {
        "op": "join",
        "on": "l.product_id = r.id",
        "left": scan(catalog.describe("reviews")),
        "right": scan(catalog.describe("products")),
    }
    return {
        "version": 1,
        "plan": {"op": "aggregate", "keys": ["name"], "aggs": [{"name": "avg_rating", "expr": expr}], "input": join},
    }


def choose(*names: str) -> RecordedAnswer:
    return RecordedAnswer(json.dumps({"datasets": list(names), "reason": "ratings are in reviews"}), 400, 30)


def outline(*operators: str) -> RecordedAnswer:
    steps = [{"operator": op, "purpose": f"step {op}"} for op in operators]
    return RecordedAnswer(json.dumps({"steps": steps}), 2000, 80)


def plan(document: dict[str, Any] | str) -> RecordedAnswer:
    return RecordedAnswer(document if isinstance(document, str) else json.dumps(document), 1500, 300)


def judge(verdict: str, mismatch: str = "", correction: str = "") -> RecordedAnswer:
    return RecordedAnswer(rendered_judgement(verdict, mismatch, correction), 900, 40)


def recorded(**answers: list[RecordedAnswer]) -> RecordedModel:
    """``recorded(profiling_choose=[...], ...)``: keys are agent_step."""
    return RecordedModel({key.replace("_", "/", 1): items for key, items in answers.items()}, PROFILE)


def accepts(count: int = 3) -> list[RecordedAnswer]:
    return [judge("accept") for _ in range(count)]
