from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from sql_cases import TABLES
from sql_reference import memory_scan

from semray.operators import Node, Scan, Schema, SourceSpec


@pytest.fixture(scope="session")
def scans() -> dict[str, Node]:
    """Memory scans of the shared test tables (evaluated by the DuckDB reference evaluator)."""
    return {name: memory_scan(name, table) for name, table in TABLES.items()}


@pytest.fixture(scope="session")
def corpus() -> dict[str, Node]:
    """CSV scans (never read) for plan-shape tests: reviews, products, emails."""

    def scan(path: str, *columns: tuple[str, str]) -> Scan:
        return Scan(source=SourceSpec(kind="csv", path=path), source_schema=Schema.of(*columns))

    return {
        "reviews": scan(
            "/data/reviews.csv", ("id", "BIGINT"), ("product", "VARCHAR"), ("rating", "BIGINT"), ("review", "VARCHAR")
        ),
        "products": scan("/data/products.csv", ("product", "VARCHAR"), ("category", "VARCHAR"), ("price", "DOUBLE")),
        "emails": scan("/data/emails.csv", ("id", "BIGINT"), ("body", "VARCHAR")),
    }
