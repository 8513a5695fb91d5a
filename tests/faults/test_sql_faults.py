"""Fault corpus for the SQL surface (issue 26): every bad query is a typed SemrayError naming its
cause (nesting and length limits, statements other than SELECT, score ranges, bad literals), or
a documented correct result; none is a raw traceback. Queries compile against a scan of a small
CSV in ``tmp_path``; a few go through ``semray sql``, which must exit 2 with the message. No Ray.
"""

from __future__ import annotations

import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from semray.cli import main
from semray.errors import PlanError, SemrayError
from semray.operators import Limit, Node, Scan, Schema, Sort, SourceSpec
from semray.operators.base import walk
from semray.operators.semantic import MAX_SCORE_CHOICES
from semray.operators.serialize import MAX_PLAN_DEPTH, plan_from_json, plan_to_json
from semray.sql import SqlLimitError, SqlSyntaxError, UnsupportedSqlError, compile_sql
from semray.sql.limits import MAX_EXPRESSION_DEPTH, MAX_PAREN_DEPTH, MAX_QUERY_CHARS, MAX_QUERY_OPERATORS

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module")
def tables(reviews_csv: Path) -> dict[str, Node]:
    schema = Schema.of(("review_id", "BIGINT"), ("product", "VARCHAR"), ("rating", "BIGINT"), ("review", "VARCHAR"))
    return {"reviews": Scan(source=SourceSpec(kind="csv", path=str(reviews_csv)), source_schema=schema)}


# -- compiled queries -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SqlCase:
    id: str
    query: str
    error: type[SemrayError] | tuple[type[SemrayError], ...] | None
    patterns: tuple[str, ...] = ()


def parens(depth: int) -> str:
    return "SELECT * FROM reviews WHERE " + "(" * depth + "rating > 1" + ")" * depth


def ors(count: int) -> str:
    return "SELECT * FROM reviews WHERE " + " OR ".join(["rating = 1"] * count)


def subqueries(depth: int) -> str:
    return "SELECT * FROM " + "(SELECT * FROM " * depth + "reviews" + ")" * depth


def chained_ctes(count: int) -> str:
    """``count`` WITH clauses, each filtering the one before: about two operators each."""
    ctes = ", ".join(
        f"c{i} AS (SELECT review_id + 1 AS review_id, review FROM {'reviews' if i == 0 else f'c{i - 1}'} "
        f"WHERE review_id > {i})"
        for i in range(count)
    )
    return f"WITH {ctes} SELECT * FROM c{count - 1}"


def joins(count: int) -> str:
    chain = " ".join(f"JOIN reviews AS r{i} ON r{i}.review_id = r0.review_id" for i in range(1, count + 1))
    return f"SELECT r0.review FROM reviews AS r0 {chain}"


def score(lo: str, hi: str) -> str:
    return f"SELECT SEM_SCORE('How positive is {{review}}?', {lo}, {hi}) AS stars FROM reviews"


NESTED = rf"more than {MAX_PAREN_DEPTH} levels deep"
DEEP = rf"more than {MAX_EXPRESSION_DEPTH} levels deep"
STATEMENT = (UnsupportedSqlError, SqlSyntaxError)

PLAN_DEEP = rf"compiles to a plan more than {MAX_PLAN_DEPTH} operators deep"

SQL_CASES = [
    # a compiled plan deeper than a JSON plan may be (EXPLAIN and the journal would recurse past Python's limit)
    SqlCase("ctes-2000-chained", chained_ctes(2000), SqlLimitError, (PLAN_DEEP, "line 1, column", "WITH clauses")),
    SqlCase("ctes-40-chained", chained_ctes(40), SqlLimitError, (PLAN_DEEP,)),
    SqlCase("ctes-25-chained-ok", chained_ctes(25), None),
    SqlCase("joins-300", joins(300), SqlLimitError, (PLAN_DEEP, "joins")),
    SqlCase("joins-70", joins(70), SqlLimitError, (PLAN_DEEP,)),
    SqlCase("joins-20-ok", joins(20), None),
    # nesting and length: refused with the limit, never a RecursionError
    SqlCase("parens-3000", parens(3000), SqlLimitError, (NESTED, "line 1, column")),
    SqlCase("parens-500", parens(500), SqlLimitError, (NESTED,)),
    SqlCase("parens-just-past", parens(MAX_PAREN_DEPTH + 1), SqlLimitError, (NESTED,)),
    SqlCase("parens-at-limit", parens(MAX_PAREN_DEPTH), None),
    SqlCase(
        "functions-3000",
        "SELECT " + "abs(" * 3000 + "rating" + ")" * 3000 + " AS x FROM reviews",
        SqlLimitError,
        (NESTED,),
    ),
    SqlCase("subqueries-200", subqueries(200), SqlLimitError, (NESTED, "WITH")),
    SqlCase("subqueries-at-limit", subqueries(MAX_PAREN_DEPTH - 1), None),
    SqlCase(
        "brackets-3000", "SELECT " + "[" * 3000 + "rating" + "]" * 3000 + " AS x FROM reviews", SqlLimitError, (NESTED,)
    ),
    SqlCase("not-3000", "SELECT * FROM reviews WHERE " + "NOT " * 3000 + "rating > 1", SqlLimitError, (NESTED, "NOT")),
    SqlCase("minus-3000", "SELECT " + "- " * 3000 + "rating AS x FROM reviews", SqlLimitError, (NESTED,)),
    SqlCase(
        "case-400",
        "SELECT " + "CASE WHEN rating > 1 THEN " * 400 + "1" + " END" * 400 + " AS x FROM reviews",
        SqlLimitError,
        (NESTED, "CASE"),
    ),
    SqlCase("or-120k", ors(120_000), SqlLimitError, ("characters long", f"{MAX_QUERY_CHARS:,}")),
    SqlCase("or-17k", ors(17_000), SqlLimitError, (f"more than the {MAX_QUERY_OPERATORS:,}", "34,000 operators", "IN")),
    SqlCase("or-2000", ors(2000), SqlLimitError, (DEEP, "IN")),
    SqlCase("or-at-limit", ors(MAX_EXPRESSION_DEPTH - 20), None),
    SqlCase("and-3000", "SELECT * FROM reviews WHERE " + " AND ".join(["rating > 1"] * 3000), SqlLimitError, (DEEP,)),
    SqlCase("plus-5000", "SELECT " + "+".join(["rating"] * 5000) + " AS x FROM reviews", SqlLimitError, (DEEP,)),
    SqlCase("concat-3000", "SELECT " + " || ".join(["review"] * 3000) + " AS x FROM reviews", SqlLimitError, (DEEP,)),
    SqlCase("union-400", " UNION ALL ".join(["SELECT * FROM reviews"] * 400), SqlLimitError, (DEEP, "UNION")),
    SqlCase("in-list-20000", "SELECT * FROM reviews WHERE rating IN (" + ",".join(map(str, range(20_000))) + ")", None),
    SqlCase(
        "text-too-long", "SELECT '" + "x" * MAX_QUERY_CHARS + "' AS x FROM reviews", SqlLimitError, ("characters long",)
    ),
    # SEM_SCORE ranges (checked at the operator, so SQL, JSON and Python agree)
    SqlCase("score-1e308", score("-1e308", "1e308"), PlanError, (f"{MAX_SCORE_CHOICES:,}", "line 1, column 8")),
    SqlCase(
        "score-1-to-1e7", score("1", "10000000"), PlanError, ("10,000,000 whole numbers", f"{MAX_SCORE_CHOICES:,}")
    ),
    SqlCase("score-inf", score("1", "1e400"), PlanError, ("not a finite number",)),
    SqlCase("score-5000-digits", score("1", "9" * 5000), PlanError, ("not a finite number",)),
    SqlCase("score-nan", score("0", "NaN"), UnsupportedSqlError, ("non-numeric bound",)),
    SqlCase("score-equal", score("5", "5"), PlanError, ("must be below",)),
    SqlCase("score-reversed", score("-5", "-10"), PlanError, ("lo=-5 must be below hi=-10",)),
    SqlCase("score-string-bound", score("'1'", "5"), UnsupportedSqlError, ("non-numeric bound",)),
    SqlCase("score-1001-choices", score("0", "1000"), PlanError, ("1,001 whole numbers",)),
    SqlCase("score-1000-choices-ok", score("1", "1000"), None),
    SqlCase("score-free-number-ok", score("0.5", "1000000.5"), None),
    # numeric literals that Python's int() would refuse or that do not fit in 64 bits
    SqlCase(
        "limit-5000-digits", "SELECT * FROM reviews LIMIT " + "9" * 5000, UnsupportedSqlError, ("LIMIT 9999", "64 bits")
    ),
    SqlCase("limit-2-pow-64", "SELECT * FROM reviews LIMIT 18446744073709551616", UnsupportedSqlError, ("64 bits",)),
    SqlCase("limit-negative", "SELECT * FROM reviews LIMIT -1", UnsupportedSqlError, ("LIMIT -1",)),
    SqlCase("limit-fraction", "SELECT * FROM reviews LIMIT 2.5", UnsupportedSqlError, ("LIMIT 2.5",)),
    SqlCase("limit-string", "SELECT * FROM reviews LIMIT '3'", UnsupportedSqlError, ("LIMIT '3'",)),
    SqlCase(
        "offset-5000-digits",
        "SELECT * FROM reviews LIMIT 1 OFFSET " + "9" * 5000,
        UnsupportedSqlError,
        ("OFFSET 9999",),
    ),
    SqlCase("limit-int64-max-ok", "SELECT * FROM reviews LIMIT 9223372036854775807 OFFSET 5", None),
    SqlCase(
        "order-by-fraction",
        "SELECT rating FROM reviews ORDER BY 2.5",
        UnsupportedSqlError,
        ("ORDER BY 2.5", "position between 1 and 1"),
    ),
    SqlCase(
        "order-by-5000-digits",
        "SELECT rating FROM reviews ORDER BY " + "9" * 5000,
        UnsupportedSqlError,
        (r"ORDER BY 9{24}\.\.\.",),
    ),
    SqlCase("order-by-zero", "SELECT rating FROM reviews ORDER BY 0", UnsupportedSqlError, ("ORDER BY 0",)),
    SqlCase(
        "group-by-fraction",
        "SELECT rating, count(*) AS n FROM reviews GROUP BY 2.5",
        UnsupportedSqlError,
        ("GROUP BY 2.5",),
    ),
    SqlCase(
        "group-by-5000-digits",
        "SELECT rating, count(*) AS n FROM reviews GROUP BY " + "9" * 5000,
        UnsupportedSqlError,
        ("GROUP BY 9999",),
    ),
    SqlCase(
        "union-order-by-fraction",
        "SELECT rating FROM reviews UNION ALL SELECT rating FROM reviews ORDER BY 1.5",
        UnsupportedSqlError,
        ("ORDER BY",),
    ),
    # one query only: no statement that touches files, extensions, settings or the catalog
    SqlCase("empty", "", SqlSyntaxError, ("empty query",)),
    SqlCase("blank", "  \n\t ", SqlSyntaxError, ("empty query",)),
    SqlCase("semicolons", ";;", SqlSyntaxError, ("empty query",)),
    SqlCase("comment-only", "-- nothing here", SqlSyntaxError, ("empty query",)),
    SqlCase(
        "two-selects", "SELECT * FROM reviews; SELECT * FROM reviews", UnsupportedSqlError, ("several statements",)
    ),
    SqlCase(
        "select-then-drop", "SELECT * FROM reviews; DROP TABLE reviews", UnsupportedSqlError, ("several statements",)
    ),
    SqlCase(
        "select-then-attach",
        "SELECT * FROM reviews; ATTACH '/tmp/x.db' AS x",
        UnsupportedSqlError,
        ("several statements",),
    ),
    SqlCase("copy-to", "COPY reviews TO '/tmp/out.csv'", UnsupportedSqlError, ("COPY statements",)),
    SqlCase("copy-from", "COPY reviews FROM '/etc/passwd'", UnsupportedSqlError, ("COPY statements",)),
    SqlCase("attach", "ATTACH '/tmp/x.db' AS x", UnsupportedSqlError, ("ATTACH statements",)),
    SqlCase("detach", "DETACH x", UnsupportedSqlError, ("DETACH statements",)),
    SqlCase("pragma", "PRAGMA enable_profiling", UnsupportedSqlError, ("PRAGMA statements",)),
    SqlCase("set", "SET enable_external_access = true", UnsupportedSqlError, ("SET statements",)),
    SqlCase("reset", "RESET threads", UnsupportedSqlError, ("RESET statements",)),
    SqlCase("install", "INSTALL httpfs", UnsupportedSqlError, ("INSTALL statements",)),
    SqlCase("force-install", "FORCE INSTALL httpfs", UnsupportedSqlError, ("INSTALL statements",)),
    SqlCase("load", "LOAD httpfs", UnsupportedSqlError, ("LOAD statements",)),
    SqlCase("call", "CALL pragma_version()", UnsupportedSqlError, ("CALL statements",)),
    SqlCase("export", "EXPORT DATABASE '/tmp/dump'", STATEMENT, ()),
    SqlCase("import", "IMPORT DATABASE '/tmp/dump'", STATEMENT, ()),
    SqlCase("checkpoint", "CHECKPOINT", STATEMENT, ("expected SELECT",)),
    SqlCase("vacuum", "VACUUM", UnsupportedSqlError, ("VACUUM statements",)),
    SqlCase("create", "CREATE TABLE x AS SELECT * FROM reviews", UnsupportedSqlError, ("CREATE statements",)),
    SqlCase("insert", "INSERT INTO reviews VALUES (1, 'a', 2, 'b')", UnsupportedSqlError, ("INSERT statements",)),
    SqlCase("update", "UPDATE reviews SET rating = 1", UnsupportedSqlError, ("UPDATE statements",)),
    SqlCase("delete", "DELETE FROM reviews", UnsupportedSqlError, ("DELETE statements",)),
    SqlCase("drop", "DROP TABLE reviews", UnsupportedSqlError, ("DROP statements",)),
    SqlCase("alter", "ALTER TABLE reviews ADD COLUMN x INT", UnsupportedSqlError, ("ALTER statements",)),
    SqlCase("begin", "BEGIN TRANSACTION", UnsupportedSqlError, ("TRANSACTION statements",)),
    SqlCase("commit", "COMMIT", UnsupportedSqlError, ("COMMIT statements",)),
    SqlCase("rollback", "ROLLBACK", UnsupportedSqlError, ("ROLLBACK statements",)),
    SqlCase("show", "SHOW TABLES", UnsupportedSqlError, ("SHOW statements",)),
    SqlCase("describe", "DESCRIBE reviews", UnsupportedSqlError, ("DESCRIBE statements",)),
    SqlCase("summarize", "SUMMARIZE reviews", UnsupportedSqlError, ("SUMMARIZE statements",)),
    SqlCase("use", "USE other", UnsupportedSqlError, ("USE statements",)),
    SqlCase("explain", "EXPLAIN SELECT * FROM reviews", UnsupportedSqlError, ("EXPLAIN statements",)),
    SqlCase("table-function", "SELECT * FROM read_csv('/etc/passwd')", UnsupportedSqlError, ("FROM item",)),
    # clauses on a FROM item or a parenthesized query: refused, never dropped (they were: every row came back)
    SqlCase("tablesample-on-table", "SELECT * FROM reviews TABLESAMPLE 10%", UnsupportedSqlError, ("TABLESAMPLE",)),
    SqlCase(
        "tablesample-rows", "SELECT * FROM reviews AS r TABLESAMPLE (5 ROWS)", UnsupportedSqlError, ("TABLESAMPLE",)
    ),
    SqlCase(
        "tablesample-on-joined",
        "SELECT * FROM reviews JOIN reviews AS b TABLESAMPLE 10% ON reviews.review_id = b.review_id",
        UnsupportedSqlError,
        ("TABLESAMPLE",),
    ),
    SqlCase(
        "tablesample-on-subquery",
        "SELECT * FROM (SELECT * FROM reviews) AS s TABLESAMPLE 10%",
        UnsupportedSqlError,
        ("TABLESAMPLE",),
    ),
    SqlCase("pivot", "SELECT * FROM reviews PIVOT (count(*) FOR rating IN (1, 2))", UnsupportedSqlError, ("PIVOT",)),
    SqlCase("unpivot", "SELECT * FROM reviews UNPIVOT (v FOR k IN (review))", UnsupportedSqlError, ("PIVOT",)),
    SqlCase("with-ordinality", "SELECT * FROM reviews WITH ORDINALITY", UnsupportedSqlError, ("ORDINALITY",)),
    SqlCase("time-travel", "SELECT * FROM reviews AT (VERSION => 1)", UnsupportedSqlError, ("temporal",)),
    SqlCase(
        "where-after-parentheses",
        "(SELECT * FROM reviews) WHERE rating > 1",
        UnsupportedSqlError,
        ("WHERE after a parenthesized query",),
    ),
    SqlCase(
        "sample-after-parentheses",
        "(SELECT * FROM reviews) TABLESAMPLE 10%",
        UnsupportedSqlError,
        ("TABLESAMPLE after a parenthesized query", "use LIMIT"),
    ),
]


@pytest.mark.parametrize(
    "query",
    [
        "(SELECT * FROM reviews) ORDER BY rating DESC LIMIT 2 OFFSET 1",
        "((SELECT * FROM reviews) ORDER BY rating DESC LIMIT 2 OFFSET 1)",
        "SELECT * FROM ((SELECT * FROM reviews) ORDER BY rating DESC LIMIT 2 OFFSET 1) AS s",
    ],
    ids=["outer", "nested", "from-item"],
)
def test_a_parenthesized_query_keeps_its_order_and_limit(query: str, tables: dict[str, Node]) -> None:
    """The parentheses were unwrapped with what followed them: every row came back, unordered."""
    plan = compile_sql(query, tables)
    limits = [node for node in walk(plan) if isinstance(node, Limit)]
    sorts = [node for node in walk(plan) if isinstance(node, Sort)]
    assert [(limit.count, limit.offset) for limit in limits] == [(2, 1)]
    assert [key.column for sort in sorts for key in sort.keys] == ["rating"] and sorts[0].keys[0].descending


@pytest.mark.parametrize("case", SQL_CASES, ids=[case.id for case in SQL_CASES])
def test_sql_fault(case: SqlCase, tables: dict[str, Node]) -> None:
    if case.error is None:
        assert isinstance(compile_sql(case.query, tables), Node)
        return
    with pytest.raises(case.error) as raised:
        compile_sql(case.query, tables)
    message = str(raised.value)
    for pattern in case.patterns:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"


@pytest.mark.parametrize("query", [chained_ctes(25), joins(20)], ids=["ctes-25", "joins-20"])
def test_a_plan_within_the_depth_limit_round_trips_through_json(query: str, tables: dict[str, Node]) -> None:
    """What the SQL surface compiles, a run can journal and a resume read back."""
    plan = compile_sql(query, tables)
    assert plan_from_json(plan_to_json(plan)) == plan


def test_the_sql_corpus_is_large() -> None:
    assert len(SQL_CASES) >= 60


def test_a_deep_caller_still_gets_a_typed_error(tables: dict[str, Node]) -> None:
    """At the limits, compiling works even from deep in a caller's stack; past what Python can
    recurse, the backstop turns the RecursionError into a SqlLimitError."""

    def nest(levels: int, query: str) -> Node:
        return compile_sql(query, tables) if levels == 0 else nest(levels - 1, query)

    assert isinstance(nest(250, parens(MAX_PAREN_DEPTH)), Node)
    assert isinstance(nest(250, ors(MAX_EXPRESSION_DEPTH - 20)), Node)
    frames = len(inspect.stack(context=0))
    with pytest.raises(SqlLimitError, match="too deeply nested to compile"):
        nest(sys.getrecursionlimit() - frames - 40, parens(MAX_PAREN_DEPTH))


# -- through the command line ------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("COPY reviews TO '/tmp/out.csv'", "COPY statements are not supported"),
        ("ATTACH '/tmp/x.db' AS x", "ATTACH statements are not supported"),
        ("PRAGMA version", "PRAGMA statements are not supported"),
        ("SET threads = 1", "SET statements are not supported"),
        ("INSTALL httpfs", "INSTALL statements are not supported"),
        ("LOAD httpfs", "LOAD statements are not supported"),
        (parens(3000), "levels deep"),
    ],
)
def test_cli_sql_refuses_statements(
    tmp_path: Path, reviews_csv: Path, capsys: pytest.CaptureFixture[str], query: str, expected: str
) -> None:
    argv = ["--state-dir", str(tmp_path / "state"), "sql", query, "--table", f"reviews={reviews_csv}", "--explain"]
    assert main(argv) == 2
    assert expected in capsys.readouterr().err
