"""Differential tests through the real pipeline: compiled SQL runs on a local Ray
(many small partitions and batches) and must match DuckDB running the same SQL.

The cluster-free differential tests (test_sql_differential.py) cover many more queries;
these check that the pipeline agrees on a cross-section, within a time budget.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from sql_cases import TABLES
from sql_random import Case, cases
from sql_reference import assert_same_rows, memory_scan, run_duckdb

from semray.operators import Filter, Node
from semray.settings import Settings
from semray.sql import compile_sql

pytestmark = pytest.mark.ray

RAY_QUERIES: list[tuple[str, bool]] = [
    ("SELECT id, rating * 2 + 1 AS r, upper(review) FROM reviews WHERE review IS NOT NULL AND rating > 1", False),
    ("SELECT product_id, count(*) AS n, sum(rating), avg(weight), max(review) FROM reviews GROUP BY product_id", False),
    ("SELECT count(*) AS n, max(id) FROM empty", False),
    ("SELECT product FROM (SELECT product_id AS product FROM reviews) s GROUP BY product HAVING count(*) > 1", False),
    ("SELECT DISTINCT review FROM reviews", False),
    ("SELECT id FROM reviews ORDER BY weight DESC NULLS FIRST, id LIMIT 4 OFFSET 1", True),
    ("SELECT id FROM reviews ORDER BY id OFFSET 5", True),
    (
        "SELECT id, review FROM reviews UNION ALL SELECT id, name FROM products UNION ALL SELECT id, name FROM empty",
        False,
    ),
    ("SELECT rating FROM reviews UNION SELECT price FROM products ORDER BY 1", True),
    ("WITH a(x) AS (SELECT id FROM reviews) SELECT x * 10 AS y FROM a WHERE x > 2", False),
    ("SELECT r.id, p.name FROM reviews r LEFT JOIN products p ON r.product_id = p.id AND p.price > 10", False),
    ("SELECT r.id, p.name FROM reviews r JOIN products p ON r.product_id = p.id AND r.rating > p.price / 100", False),
    ("SELECT * FROM reviews r RIGHT JOIN products p ON r.product_id = p.id", False),
    ("SELECT * FROM products JOIN reviews USING (id)", False),
    ("SELECT name FROM products WHERE id IN (SELECT product_id FROM reviews WHERE rating = 5)", False),
    ("SELECT name FROM products p WHERE NOT EXISTS (SELECT * FROM reviews r WHERE p.id = r.product_id)", False),
    ("SELECT p.name, count(*) AS n FROM reviews r JOIN products p ON r.product_id = p.id GROUP BY p.name", False),
]

_REFS = itertools.count()


@pytest.fixture(scope="module")
def ray_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """One local Ray for the module: loopback only, 2 CPUs, no dashboard, short temp dir."""
    import os

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    from semray.cluster.connect import connect, shutdown

    state = Path(tmp_path_factory.mktemp("sqlray"))
    configured = Settings(state_dir=state, num_cpus=2, batch_size=2)
    started_here = not ray.is_initialized()
    connect(configured)
    yield configured
    if started_here:  # leave a cluster that another fixture started to that fixture
        shutdown()


def partitioned_scans(tables: dict[str, pa.Table]) -> dict[str, Node]:
    """Memory scans read as many tasks of at most two rows each."""
    from semray.sources import register_table

    scans: dict[str, Node] = {}
    for name, table in tables.items():
        ref = f"sqltest-{name}-{next(_REFS)}"
        if table.num_rows == 0:
            # Memory sources refuse empty tables; an all-null row filtered away is an empty input.
            placeholder = pa.Table.from_pylist([dict.fromkeys(table.column_names)], schema=table.schema)
            register_table(placeholder, ref)
            scans[name] = Filter(input=memory_scan(name, placeholder, ref=ref), predicate="false")
            continue
        register_table(table, ref)
        scans[name] = memory_scan(name, table, ref=ref, task_rows=2)
    return scans


def run(plan: Node, configured: Settings) -> pa.Table:
    from semray.api import Query

    return Query(plan, configured).collect()


@pytest.mark.parametrize(("query", "ordered"), RAY_QUERIES, ids=[query[:50] for query, _ in RAY_QUERIES])
def test_fixed_queries_on_ray_match_duckdb(ray_settings: Settings, query: str, ordered: bool) -> None:
    plan = compile_sql(query, partitioned_scans(TABLES))
    assert_same_rows(run(plan, ray_settings), run_duckdb(query, TABLES), ordered=ordered, context=query)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(case=cases())
def test_random_queries_on_ray_match_duckdb(ray_settings: Settings, case: Case) -> None:
    plan = compile_sql(case.sql, partitioned_scans(case.tables))
    assert_same_rows(run(plan, ray_settings), run_duckdb(case.sql, case.tables), ordered=case.ordered, context=case.sql)
