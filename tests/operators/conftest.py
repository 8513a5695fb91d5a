from __future__ import annotations

import pytest

from semray.operators import Scan, Schema, SourceSpec


@pytest.fixture
def reviews() -> Scan:
    schema = Schema.of(("review_id", "VARCHAR"), ("product", "VARCHAR"), ("rating", "BIGINT"), ("review", "VARCHAR"))
    return Scan(source=SourceSpec(kind="csv", path="/data/reviews.csv"), source_schema=schema)


@pytest.fixture
def products() -> Scan:
    schema = Schema.of(("product", "VARCHAR"), ("category", "VARCHAR"), ("list_price", "DOUBLE"))
    return Scan(source=SourceSpec(kind="csv", path="/data/products.csv"), source_schema=schema)
