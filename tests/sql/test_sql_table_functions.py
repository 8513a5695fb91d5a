"""SEM_TOPK and SEM_SEARCH as table functions in FROM (``sql/table_functions.py``)."""

from __future__ import annotations

import pytest

from semray.errors import ColumnNotFoundError, PlanError, TableNotFoundError
from semray.operators import Aggregate, Filter, Join, Node, Project, SemSearch, SemTopK, Sort
from semray.sql import compile_sql
from semray.sql.diagnostics import UnsupportedSqlError


def test_sem_topk_over_a_table_ranks_its_rows(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT * FROM SEM_TOPK(reviews, 'the angriest {review}', 3)", corpus)
    assert plan == SemTopK(input=corpus["reviews"], instruction="the angriest {review}", k=3)
    assert plan.output_schema.names[-1] == "rank"


def test_sem_topk_over_a_subquery_with_an_alias_and_qualified_references(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT t.id, t.rank FROM SEM_TOPK((SELECT id, review FROM reviews WHERE rating <= 2), "
        "'the most urgent {review}', 5) AS t ORDER BY t.rank",
        corpus,
    )
    assert isinstance(plan, Sort) and isinstance(plan.input, Project)
    (topk,) = [node for node in _walk(plan) if isinstance(node, SemTopK)]
    assert topk.k == 5 and topk.instruction == "the most urgent {review}"
    assert isinstance(topk.input, Project) and isinstance(topk.input.input, Filter)
    assert plan.output_schema.names[1:] == ("id", "rank")


def test_sem_search_modes_and_default(corpus: dict[str, Node]) -> None:
    plan = compile_sql("SELECT id, score FROM SEM_SEARCH(reviews, 'review', 'battery drains fast', 10)", corpus)
    (search,) = [node for node in _walk(plan) if isinstance(node, SemSearch)]
    assert (search.column, search.query, search.k, search.mode) == ("review", "battery drains fast", 10, "vector")
    hybrid = compile_sql("SELECT * FROM SEM_SEARCH(reviews, 'review', 'late parcel', 4, 'HYBRID')", corpus)
    assert isinstance(hybrid, SemSearch) and hybrid.mode == "hybrid"


def test_table_functions_join_and_group_like_tables(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "SELECT p.category, count(*) AS n FROM SEM_SEARCH(reviews, 'review', 'broken screen', 20) AS s "
        "JOIN products AS p ON s.product = p.product GROUP BY p.category",
        corpus,
    )
    assert isinstance(plan, Aggregate | Project)
    assert any(isinstance(node, Join) for node in _walk(plan))
    assert any(isinstance(node, SemSearch) for node in _walk(plan))


def test_a_cte_feeds_a_table_function(corpus: dict[str, Node]) -> None:
    plan = compile_sql(
        "WITH bad AS (SELECT * FROM reviews WHERE rating = 1) SELECT * FROM SEM_TOPK(bad, 'the rudest {review}', 2)",
        corpus,
    )
    assert isinstance(plan, SemTopK) and isinstance(plan.input, Filter)


@pytest.mark.parametrize(
    "sql,error,message",
    [
        ("SELECT * FROM SEM_TOPK(reviews, 'x {review}')", UnsupportedSqlError, "SEM_TOPK with 2 arguments"),
        ("SELECT * FROM SEM_TOPK(reviews, 'x {review}', 0)", UnsupportedSqlError, "whole number of rows >= 1"),
        ("SELECT * FROM SEM_TOPK(reviews, 'x {review}', 2.5)", UnsupportedSqlError, "whole number"),
        ("SELECT * FROM SEM_TOPK(reviews, review, 2)", UnsupportedSqlError, "pass a string literal"),
        ("SELECT * FROM SEM_TOPK('reviews', 'x {review}', 2)", UnsupportedSqlError, "table name or \\(subquery\\)"),
        ("SELECT * FROM SEM_TOPK(reveiws, 'x {review}', 2)", TableNotFoundError, "reviews"),
        ("SELECT * FROM SEM_TOPK(reviews, 'x {revew}', 2)", ColumnNotFoundError, "did you mean 'review'"),
        ("SELECT * FROM SEM_SEARCH(reviews, 'revew', 'q', 2)", ColumnNotFoundError, "did you mean 'review'"),
        ("SELECT * FROM SEM_SEARCH(reviews, 'review', 'q', 2, 'fuzzy')", UnsupportedSqlError, "vector, fts, hybrid"),
        ("SELECT * FROM SEM_SEARCH(reviews, 'rating', 'q', 2)", PlanError, "not text"),
        ("SELECT * FROM SEM_SEARCH(reviews, 'review', '', 2)", PlanError, "query is empty"),
        ("SELECT * FROM SEM_SEARCH(reviews, 'review', 'q')", UnsupportedSqlError, "SEM_SEARCH with 3 arguments"),
        ("SELECT * FROM SEM_SEARCH(reviews, 'review', 'q', 2, 'fts', 'page')", UnsupportedSqlError, "paragraph"),
        ("SELECT * FROM SEM_SEARCH(reviews, 'review', 'q', 2, 'fts', 'paragraph')", PlanError, "catalogued dataset"),
        ("SELECT SEM_TOPK(reviews, 'x {review}', 2) FROM reviews", UnsupportedSqlError, "is a table function"),
        ("SELECT id FROM reviews ORDER BY sem_search(review) LIMIT 3", UnsupportedSqlError, "FROM SEM_SEARCH"),
    ],
)
def test_bad_table_function_calls_name_their_cause(
    corpus: dict[str, Node], sql: str, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        compile_sql(sql, corpus)


def _walk(node: Node) -> list[Node]:
    return [node, *(found for child in node.children for found in _walk(child))]
