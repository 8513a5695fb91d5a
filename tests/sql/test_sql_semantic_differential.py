"""Semantic calls inside aggregates, GROUP BY keys and ORDER BY, checked against DuckDB.

Each semantic call is answered from a label column of the table (``sql_reference.
evaluate_with_answers``); DuckDB runs the same query with each call replaced by that
column. Both must give the same rows, so the semantic nodes sit where the calls' values
are needed (below the Aggregate, per row) and the relational part around them is right.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from sql_reference import assert_same_rows, evaluate_with_answers, memory_scan, run_duckdb

from semray.operators import Aggregate, walk
from semray.sql import compile_sql

LABELED = pa.table(
    {
        "id": pa.array([1, 2, 3, 4, 5, 6, 7, 8], pa.int64()),
        "product": pa.array(["lamp", "lamp", "desk", "desk", "chair", "lamp", "desk", None], pa.string()),
        "review": pa.array(["cheap", "broke", "nice", None, "wobbly", "bright", "fine", "ok"], pa.string()),
        "positive_label": pa.array([True, False, True, None, False, True, True, False], pa.bool_()),
        "topic_label": pa.array(["price", "quality", "price", "other", "quality", "price", None, "price"], pa.string()),
        "stars_label": pa.array([5, 1, 4, None, 2, 5, 3, 1], pa.int64()),
    }
)
TABLES = {"labeled": LABELED}

POSITIVE = "SEM_FILTER('{review} is positive')"
TOPIC = "SEM_CLASSIFY('Topic of {review}', 'price|quality|other')"
STARS = "SEM_SCORE('Stars for {review}', 1, 5)"
CALLS = {POSITIVE: "positive_label", TOPIC: "topic_label", STARS: "stars_label"}
"""Each call and the label column that answers it."""
ANSWERS = {
    "{review} is positive": "positive_label",
    "Topic of {review}": "topic_label",
    "Stars for {review}": "stars_label",
}
"""Each instruction (as the plan spells it) and the label column the fake model answers it from."""

QUERIES = [
    (f"SELECT avg(CASE WHEN {POSITIVE} THEN 1.0 ELSE 0.0 END) AS share FROM labeled", False),
    (f"SELECT product, avg(CASE WHEN {POSITIVE} THEN 1.0 ELSE 0.0 END) AS share FROM labeled GROUP BY product", False),
    (f"SELECT {TOPIC} AS topic, count(*) AS n FROM labeled GROUP BY topic", False),
    (f"SELECT {TOPIC} AS topic, count(*) AS n FROM labeled GROUP BY 1", False),
    (f"SELECT {TOPIC} AS t, count(*) AS n FROM labeled GROUP BY {TOPIC}", False),
    (f"SELECT {TOPIC}, count(*) AS n FROM labeled GROUP BY ALL", False),
    (f"SELECT upper({TOPIC}) AS t, count(*) AS n FROM labeled GROUP BY 1", False),
    (f"SELECT product, avg({STARS}) AS s FROM labeled GROUP BY product", False),
    (f"SELECT product, avg({STARS}) AS s FROM labeled GROUP BY product ORDER BY s DESC NULLS LAST, product", True),
    (f"SELECT id, {STARS} AS s FROM labeled ORDER BY s DESC, id", True),
    (f"SELECT product, count(*) AS n FROM labeled GROUP BY product HAVING avg({STARS}) >= 3", False),
    (f"SELECT product FROM labeled GROUP BY product ORDER BY max({STARS}) DESC, product NULLS FIRST", True),
    (
        f"SELECT {TOPIC} AS topic, avg({STARS}) AS s, count(*) FILTER (WHERE {POSITIVE}) AS pos"
        " FROM labeled GROUP BY 1 HAVING count(*) > 1 ORDER BY topic",
        True,
    ),
    (f"SELECT product, avg({STARS}) AS s FROM labeled WHERE {STARS} > 1 GROUP BY product", False),
    (f"SELECT {TOPIC} AS topic, count(*) AS n FROM labeled WHERE {POSITIVE} GROUP BY topic", False),
    (f"SELECT sum(CASE WHEN {POSITIVE} AND {TOPIC} = 'price' THEN {STARS} END) AS s FROM labeled", False),
]


def substituted(query: str) -> str:
    """``query`` with each semantic call replaced by its label column: what DuckDB runs."""
    for call, column in CALLS.items():
        query = query.replace(call, f"({column})")
    return query


@pytest.mark.parametrize(("query", "ordered"), QUERIES, ids=[query[:70] for query, _ in QUERIES])
def test_semantic_query_matches_duckdb_over_labels(query: str, ordered: bool) -> None:
    plan = compile_sql(query, {"labeled": memory_scan("labeled", LABELED)})
    nodes = walk(plan)
    assert any(node.calls_llm for node in nodes), "the plan asks no semantic question"
    if any(isinstance(node, Aggregate) for node in nodes):
        below = walk(next(node for node in nodes if isinstance(node, Aggregate)))
        assert any(node.calls_llm for node in below), "the calls must be answered per row, below the Aggregate"
    expected = run_duckdb(substituted(query), TABLES)
    actual = evaluate_with_answers(plan, TABLES, ANSWERS)
    assert_same_rows(actual, expected, ordered=ordered, context=query)
