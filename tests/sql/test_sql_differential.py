"""Differential tests without a cluster: DuckDB runs the SQL directly; the compiled plan is
evaluated node by node by the DuckDB reference evaluator. Results must agree as multisets,
or as sequences under ORDER BY."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from sql_cases import QUERIES, TABLES
from sql_random import Case, cases
from sql_reference import assert_same_rows, evaluate, memory_scan, run_duckdb

from semray.operators import Node
from semray.sql import compile_sql


@pytest.mark.parametrize(("query", "ordered"), QUERIES, ids=[query[:60] for query, _ in QUERIES])
def test_fixed_queries_match_duckdb(scans: dict[str, Node], query: str, ordered: bool) -> None:
    expected = run_duckdb(query, TABLES)
    actual = evaluate(compile_sql(query, scans), TABLES)
    assert_same_rows(actual, expected, ordered=ordered, context=query)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_random_queries_match_duckdb(case: Case) -> None:
    scans = {name: memory_scan(name, table) for name, table in case.tables.items()}
    expected = run_duckdb(case.sql, case.tables)
    actual = evaluate(compile_sql(case.sql, scans), case.tables)
    assert_same_rows(actual, expected, ordered=case.ordered, context=case.sql)
