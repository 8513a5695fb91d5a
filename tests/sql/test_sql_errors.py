"""Errors of the SQL surface: positions, what was expected, what is supported, suggestions."""

from __future__ import annotations

import pytest

from semray.errors import ColumnNotFoundError, ExpressionError, PlanError, SemrayError, TableNotFoundError
from semray.operators import Node
from semray.sql import SqlSyntaxError, UnsupportedSqlError, compile_sql


@pytest.mark.parametrize(
    ("query", "fragments"),
    [
        ("SELECT a FROM WHERE", ["line 1, column 15", "WHERE", "Expected table name"]),
        ("SELECT id FROM reviews\nWHERE rating >", ["line 2, column 14", "missing"]),
        ("SELECT id FROM reviews WHERE (rating > 1", ["line 1", "Expecting )"]),
        ("SELEC id FROM reviews", ["line 1, column 10", "FROM"]),
        ("", ["empty query"]),
    ],
)
def test_parse_errors_name_position_and_expectation(corpus: dict[str, Node], query: str, fragments: list[str]) -> None:
    with pytest.raises(SqlSyntaxError) as caught:
        compile_sql(query, corpus)
    for fragment in fragments:
        assert fragment in str(caught.value)
    assert isinstance(caught.value, SemrayError)


@pytest.mark.parametrize(
    ("query", "column", "suggestion", "position"),
    [
        ("SELECT revew FROM reviews", "revew", "review", "line 1, column 8"),
        ("SELECT r.revew FROM reviews r", "revew", "review", "line 1, column 8"),
        ("SELECT id FROM reviews WHERE ratng > 3", "ratng", "rating", "line 1, column 30"),
        ("SELECT id FROM reviews ORDER BY ratin", "ratin", "rating", "line 1, column 33"),
        ("SELECT * FROM reviews WHERE SEM_FILTER('{revew} is kind')", "revew", "review", "line 1, column 42"),
        (
            "SELECT id FROM reviews WHERE\n  SEM_FILTER('ok {review} and {prodct}')",
            "prodct",
            "product",
            "line 2, column 32",
        ),
        ("SELECT SEM_MAP('{reveiw}') AS s FROM reviews", "reveiw", "review", "line 1, column 18"),
        (
            "SELECT * FROM reviews r JOIN products p ON SEM_MATCH('{l.review} about {r.categry}')",
            "categry",
            "category",
            "line 1",
        ),
        ("SELECT * FROM reviews r JOIN products p ON r.product = p.prodct", "prodct", "product", "line 1, column 56"),
    ],
)
def test_unknown_columns_suggest_the_closest(
    corpus: dict[str, Node], query: str, column: str, suggestion: str, position: str
) -> None:
    with pytest.raises(ColumnNotFoundError) as caught:
        compile_sql(query, corpus)
    message = str(caught.value)
    assert f"did you mean {suggestion!r}" in message
    assert position in message
    assert caught.value.column == column


def test_unknown_table_suggests_the_closest(corpus: dict[str, Node]) -> None:
    with pytest.raises(
        TableNotFoundError, match=r"table 'reveiws' not found; did you mean 'reviews'\? \(at line 1, column 15\)"
    ):
        compile_sql("SELECT * FROM reveiws", corpus)


def test_unknown_qualifier_names_the_tables_in_scope(corpus: dict[str, Node]) -> None:
    with pytest.raises(TableNotFoundError, match=r"table 'x' not found \(tables: r\)"):
        compile_sql("SELECT x.review FROM reviews r", corpus)


@pytest.mark.parametrize(
    ("query", "fragments"),
    [
        ("SELECT sum(rating) OVER () FROM reviews", ["window function", "not supported", "GROUP BY"]),
        ("SELECT * FROM reviews, products", ["without a condition", "JOIN ... ON"]),
        ("SELECT * FROM reviews r FULL JOIN products p ON r.product = p.product", ["FULL OUTER JOIN", "LEFT"]),
        ("SELECT 1", ["SELECT without FROM"]),
        ("SELECT id FROM reviews INTERSECT SELECT id FROM reviews", ["INTERSECT", "UNION"]),
        ("SELECT (SELECT max(price) FROM products) FROM reviews", ["subquery inside an expression", "IN (SELECT"]),
        ("SELECT * FROM reviews WHERE EXISTS (SELECT 1 FROM products)", ["EXISTS without a correlation"]),
        (
            "SELECT * FROM reviews WHERE rating > 1 OR EXISTS (SELECT 1 FROM products)",
            ["subquery inside an expression"],
        ),
        ("SELECT * FROM reviews LIMIT rating", ["LIMIT", "integer literal"]),
        ("SELECT product, rating FROM reviews GROUP BY product", ["'rating'", "GROUP BY"]),
        ("SELECT * FROM reviews WHERE count(*) > 1", ["aggregate in WHERE", "HAVING"]),
        ("SELECT count(*) FROM reviews GROUP BY SEM_AGG('{review}')", ["semantic function in GROUP BY"]),
        ("SELECT id FROM reviews GROUP BY SEM_MAP('{review}')", ["'id'", "GROUP BY"]),
        (
            "SELECT * FROM reviews r JOIN products p ON r.product = p.product AND SEM_MAP('{review}') = 'x'",
            ["SEM_MAP here", "not in JOIN ... ON"],
        ),
        ("SELECT count(SEM_AGG('{review}')) FROM reviews", ["SEM_AGG here", "grouped query"]),
        ("SELECT * FROM reviews WHERE SEM_MATCH('{review}')", ["SEM_MATCH", "JOIN ... ON"]),
        ("SELECT SEM_AGG('sum {review}') AS s, count(*) FROM reviews", ["SEM_AGG together", "JOIN"]),
        ("SELECT SEM_EXTRACT('{review}', 'who: person') FROM reviews", ["'person'", "text, int, float, bool, date"]),
        ("SELECT SEM_FILTER(review) FROM reviews", ["string instruction"]),
        ("WITH RECURSIVE t AS (SELECT 1) SELECT * FROM t", ["WITH RECURSIVE"]),
        ("SELECT DISTINCT ON (product) * FROM reviews", ["DISTINCT ON", "GROUP BY"]),
        ("SELECT * FROM reviews r LEFT JOIN products p ON r.product = p.product AND r.rating > 3", ["one table"]),
        ("SELECT product FROM reviews r JOIN products p ON r.product = p.product", ["ambiguous", "r.product"]),
        ("SELECT id FROM reviews UNION SELECT product, category FROM products", ["2 columns", "branch 1 has 1"]),
        ("INSERT INTO reviews VALUES (1)", ["INSERT", "SELECT"]),
        ("SELECT 1; SELECT 2", ["one SELECT"]),
    ],
)
def test_unsupported_constructs_say_what_is_supported(
    corpus: dict[str, Node], query: str, fragments: list[str]
) -> None:
    with pytest.raises(UnsupportedSqlError) as caught:
        compile_sql(query, corpus)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_plan_errors_carry_the_query_position(corpus: dict[str, Node]) -> None:
    with pytest.raises(PlanError, match=r"no equality .* \(at line 1, column 30\)"):
        compile_sql("SELECT * FROM reviews r JOIN products p ON r.rating > p.price", corpus)
    with pytest.raises(ExpressionError, match=r"does not type-check.*\(at line 1, column 29\)"):
        compile_sql("SELECT * FROM reviews WHERE rating > 'abc' + 1", corpus)
    with pytest.raises(PlanError, match=r"at least two labels \(at line 1, column 8\)"):
        compile_sql("SELECT SEM_CLASSIFY('{review}', 'good') AS c FROM reviews", corpus)
