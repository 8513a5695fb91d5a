"""Expression safety corpus: no plan expression, from any surface, can read a file or the session.

A JSON plan is data a user may not have written; its filter, projection, aggregate and join
expressions are spliced into DuckDB statements. Each hostile expression below must be refused
when the plan is built (a typed ``ExpressionError``, mostly ``UnsafeExpressionError``, naming
what is wrong), from the Python builder, from a JSON plan and (where SQL can say it) from the
SQL surface; and the engine's DuckDB connections cannot open files even if one got through.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import semray
from semray.errors import ExpressionError, PlanError, SemrayError, SourceError, UnsafeExpressionError
from semray.operators.safe_sql import check_safe_expression, isolated_connection
from semray.operators.serialize import plan_from_json
from semray.pipeline.workers.batch_sql import run_sql

pytestmark = pytest.mark.timeout(60)

SECRET = "/etc/hostname"

# (expression, a word the error must contain)
READS_FILES = [
    (f"(SELECT count(*) FROM read_text('{SECRET}')) > 0", "subquery"),
    (f"(SELECT content FROM read_text('{SECRET}')) IS NOT NULL", "subquery"),
    (f"EXISTS (SELECT 1 FROM read_csv('{SECRET}'))", "subquery"),
    (f"EXISTS (SELECT * FROM read_csv_auto('{SECRET}'))", "subquery"),
    (f"a IN (SELECT 1 FROM read_blob('{SECRET}'))", "subquery"),
    (f"a NOT IN (SELECT length(content) FROM read_text('{SECRET}'))", "subquery"),
    (f"a = ANY (SELECT 1 FROM read_text('{SECRET}'))", "subquery"),
    ("(SELECT count(*) FROM glob('/etc/*')) > 0", "subquery"),
    ("(SELECT count(*) FROM read_parquet('/tmp/x.parquet')) > 0", "subquery"),
    ("(SELECT count(*) FROM parquet_scan('/tmp/x.parquet')) > 0", "subquery"),
    ("(SELECT count(*) FROM read_json('/tmp/x.json')) > 0", "subquery"),
    ("(SELECT count(*) FROM read_json_auto('/tmp/x.json')) > 0", "subquery"),
    ("(SELECT count(*) FROM sniff_csv('/etc/passwd')) > 0", "subquery"),
    ("(SELECT count(*) FROM query('SELECT 1')) > 0", "subquery"),
    ("(SELECT count(*) FROM query_table('t')) > 0", "subquery"),
    ("(SELECT count(*) FROM duckdb_settings()) > 0", "subquery"),
    ("(SELECT count(*) FROM duckdb_extensions()) > 0", "subquery"),
    ("(SELECT count(*) FROM pragma_database_list) > 0", "subquery"),
    ("(SELECT count(*) FROM '/etc/passwd') > 0", "subquery"),
    ("(SELECT count(*) FROM 'https://example.invalid/x.csv') > 0", "subquery"),
    ("(WITH t AS (SELECT 1) SELECT count(*) FROM t) > 0", "subquery"),
    ("(SELECT 1 UNION ALL SELECT 2 LIMIT 1) = 1", "subquery"),
    ("(SELECT max(a) FROM batch) > 0", "subquery"),
    ("coalesce((SELECT 1), 0) = 1", "subquery"),
    (f"CASE WHEN a > 0 THEN (SELECT 1 FROM read_text('{SECRET}')) ELSE 0 END = 1", "subquery"),
    (f"length((SELECT string_agg(content, '') FROM read_text('{SECRET}'))) > 0", "subquery"),
    (f"list_contains((SELECT list(content) FROM read_text('{SECRET}')), 'x')", "subquery"),
    # Quote and parenthesis tricks: what DuckDB parses is what is checked.
    (f"'\\' || (SELECT content FROM read_text('{SECRET}')) || '' = 'x'", "subquery"),
    ("'it''s' = b OR (SELECT 1) = 1", "subquery"),
    (f"a > 0) AS value FROM read_text('{SECRET}') --", "parse|expression"),
    (f"a > 0) AND (SELECT 1 FROM read_text('{SECRET}')) = (1", "parse|subquery"),
    ("a > 0); COPY (SELECT 1) TO '/tmp/pwned.csv'; SELECT (1", "parse|expression"),
    ("1; ATTACH '/tmp/pwned.db'", "parse|expression"),
    (f"a > 0 /* */ ) FROM read_text('{SECRET}') WHERE (1 = 1", "parse|expression"),
]

READS_SESSION = [
    ("current_setting('threads') > 0", "session"),
    ("current_setting('enable_external_access')", "session"),
    ("length(current_query()) > 0", "session"),
    ("getvariable('x') IS NULL", "session"),
    ("getenv('HOME') IS NOT NULL", "session"),
    ("length(CURRENT_SETTING('home_directory')) > 0", "session"),
]

NOT_SCALAR = [
    ("row_number() OVER () > 1", "window"),
    ("sum(a) OVER (PARTITION BY b) > 1", "window"),
    ("a > $1", "parameter"),
    ("a > ?", "parameter"),
    ("a > $name", "parameter"),
    ("COLUMNS('.*') IS NOT NULL", "COLUMNS"),
    ("unnest([a, a]) > 0", "number of rows"),
    ("sum(a) > 1", "aggregate"),
    ("count(*) > 1", "aggregate"),
    ("avg(a) > 1", "aggregate"),
]

HOSTILE = READS_FILES + READS_SESSION + NOT_SCALAR

SAFE = [
    "a >= 1 AND b LIKE 'x%'",
    "a IN (1, 2, 3) OR b IS NULL",
    "CASE WHEN a > 1 THEN 'big' ELSE 'small' END = 'big'",
    "CAST(a AS DOUBLE) BETWEEN 0.5 AND 2.5",
    "TRY_CAST(b AS INTEGER) IS NULL",
    "lower(trim(b)) = 'x'",
    "regexp_matches(b, '^[a-z]+$')",
    "list_contains([1, 2], a)",
    "length(b) > 0 AND NOT (a = 2)",
    "coalesce(a, 0) + 1 > 1",
    "b || '-' || CAST(a AS VARCHAR) <> 'x'",
    "strlen(b) < 100",
    "date_part('year', DATE '2024-01-02') = 2024",
    "a % 2 = 0",
    "'read_text(/etc/hostname)' <> b",
    "b <> 'SELECT * FROM read_text(''/etc/hostname'')'",
    "hash(b) IS NOT NULL",
    "list_sum([a, a]) > 0",
]


@pytest.fixture(scope="module")
def csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("safety") / "t.csv"
    path.write_text("a,b\n1,x\n2,y\n3,zz\n", encoding="utf-8")
    return path


def _filter_plan(csv: Path, predicate: str) -> str:
    document = json.loads(semray.read_csv(csv).filter("a > 0").to_json())
    document["plan"]["predicate"] = predicate
    return json.dumps(document)


@pytest.mark.parametrize(("expression", "word"), HOSTILE)
def test_python_filter_refuses(csv: Path, expression: str, word: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        assert semray.read_csv(csv).filter(expression).plan.output_schema
    assert re.search(word, str(caught.value), re.IGNORECASE)
    assert "Filter" in str(caught.value)


@pytest.mark.parametrize(("expression", "word"), HOSTILE)
def test_json_plan_filter_refuses(csv: Path, expression: str, word: str) -> None:
    with pytest.raises(PlanError) as caught:
        plan_from_json(_filter_plan(csv, expression))
    assert re.search(word, str(caught.value), re.IGNORECASE)


@pytest.mark.parametrize(("expression", "word"), READS_FILES + READS_SESSION)
def test_python_projection_refuses(csv: Path, expression: str, word: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        assert semray.read_csv(csv).select("a", leak=expression).plan.output_schema
    assert re.search(word, str(caught.value), re.IGNORECASE)


@pytest.mark.parametrize(("expression", "word"), READS_FILES[:12] + READS_SESSION)
def test_aggregate_refuses(csv: Path, expression: str, word: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        assert semray.read_csv(csv).aggregate(by="b", n=f"count(*) FILTER (WHERE {expression})").plan.output_schema
    assert re.search(f"{word}|expression", str(caught.value), re.IGNORECASE)


@pytest.mark.parametrize(("expression", "word"), READS_FILES[:12] + READS_SESSION)
def test_join_condition_refuses(csv: Path, expression: str, word: str) -> None:
    left = semray.read_csv(csv)
    with pytest.raises(ExpressionError):
        assert left.join(semray.read_csv(csv), f"l.a = r.a AND ({expression})").plan.output_schema


SQL_HOSTILE = [
    f"SELECT * FROM t WHERE (SELECT count(*) FROM read_text('{SECRET}')) > 0",
    f"SELECT (SELECT content FROM read_text('{SECRET}')) AS leak FROM t",
    f"SELECT * FROM read_text('{SECRET}')",
    f"SELECT * FROM t, read_csv('{SECRET}')",
    f"SELECT * FROM t WHERE b IN (SELECT content FROM read_text('{SECRET}'))",
    "SELECT current_setting('threads') AS s FROM t",
    "SELECT * FROM '/etc/passwd'",
    f"SELECT count(*) FILTER (WHERE EXISTS (SELECT 1 FROM read_text('{SECRET}'))) AS n FROM t",
    "COPY t TO '/tmp/pwned.csv'",
    "ATTACH '/tmp/pwned.db' AS pwned",
    "SET enable_external_access = true",
    "PRAGMA database_list",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SELECT 1 AS x FROM t; COPY t TO '/tmp/pwned.csv'",
]


@pytest.mark.parametrize("query", SQL_HOSTILE)
def test_sql_surface_refuses(csv: Path, query: str) -> None:
    with pytest.raises(SemrayError):
        assert semray.sql(query, tables={"t": str(csv)}).plan.output_schema
    assert not Path("/tmp/pwned.csv").exists()
    assert not Path("/tmp/pwned.db").exists()


@pytest.mark.parametrize("expression", SAFE)
def test_safe_expressions_still_build(csv: Path, expression: str) -> None:
    query = semray.read_csv(csv).filter(expression)
    assert query.plan.output_schema.names == ("_rowid", "a", "b")
    plan_from_json(_filter_plan(csv, expression))


@pytest.mark.parametrize(
    "expression",
    ["sum(a)", "count(*) FILTER (WHERE a > 1)", "count(DISTINCT b)", "string_agg(b, ',' ORDER BY b)", "max(a) - 1"],
)
def test_aggregates_are_allowed_in_aggregate(csv: Path, expression: str) -> None:
    assert semray.read_csv(csv).aggregate(by="b", v=expression).plan.output_schema


def test_deep_nesting_is_a_typed_error(csv: Path) -> None:
    deep = "(" * 3000 + "a > 1" + ")" * 3000
    with pytest.raises(ExpressionError, match="nests 3,000 levels deep"):
        assert semray.read_csv(csv).filter(deep).plan.output_schema


def test_many_ors_are_a_typed_error(csv: Path) -> None:
    """Past the operator limit (tests/faults/test_expression_limits.py has the rest of the family)."""
    wide = " OR ".join(f"a = {i}" for i in range(20_000))
    with pytest.raises(ExpressionError, match="39,999 operators"):
        assert semray.read_csv(csv).filter(wide).plan.output_schema


@pytest.mark.parametrize(
    "statement",
    [
        f"SELECT * FROM read_text('{SECRET}')",
        "SELECT * FROM glob('/etc/*')",
        "COPY (SELECT 1) TO '/tmp/pwned.csv'",
        "ATTACH '/tmp/pwned.db' AS pwned",
        "INSTALL httpfs",
        "SET enable_external_access = true",
        "SET lock_configuration = false",
    ],
)
def test_engine_connections_reach_no_file(statement: str) -> None:
    """The second layer: even SQL that got past the checks cannot open a file or unlock itself."""
    import duckdb

    with pytest.raises(duckdb.Error):
        isolated_connection().execute(statement).fetchall()
    assert not Path("/tmp/pwned.csv").exists()


def test_batch_sql_reaches_no_file() -> None:
    import duckdb
    import pyarrow as pa

    with pytest.raises(duckdb.Error, match="disabled"):
        run_sql(pa.table({"a": [1]}), f"SELECT (SELECT content FROM read_text('{SECRET}')) AS x FROM batch")


def test_duckdb_source_query_reaches_no_other_file(tmp_path: Path) -> None:
    import duckdb

    path = tmp_path / "db.duckdb"
    with duckdb.connect(str(path)) as connection:
        connection.execute("CREATE TABLE t AS SELECT 1 AS a")
    with pytest.raises(SourceError):
        semray.read_sql(path, query=f"SELECT * FROM read_text('{SECRET}')").collect()


def test_sqlite_source_query_cannot_attach(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE t (a INTEGER)")
        connection.execute("INSERT INTO t VALUES (1)")
    from semray.sources.sqlite_source import connect

    reader = connect(path)
    with pytest.raises(sqlite3.DatabaseError):
        reader.execute(f"ATTACH '{tmp_path / 'other.sqlite'}' AS other")
    with pytest.raises(sqlite3.DatabaseError):
        reader.execute(f"VACUUM INTO '{tmp_path / 'copy.sqlite'}'")
    assert reader.execute("SELECT a FROM t").fetchall() == [(1,)]
    assert not (tmp_path / "other.sqlite").exists() and not (tmp_path / "copy.sqlite").exists()


def test_unsafe_error_is_an_expression_error() -> None:
    with pytest.raises(UnsafeExpressionError, match="subquery"):
        check_safe_expression("(SELECT 1) = 1", "Filter")
    check_safe_expression("a = 1", "Filter")


def test_the_duckdb_that_reads_column_types_reaches_no_file() -> None:
    """A plan's ``source_schema`` types are spliced into ``NULL::<type>`` to build Arrow schemas;
    that DuckDB (it was a plain ``duckdb.connect()``) is the type parser's, with external access off."""
    import duckdb

    from semray.operators.schema import Schema, _type_parser, to_arrow_schema

    schema = to_arrow_schema(Schema.of(("a", "BIGINT"), ("b", "STRUCT(x VARCHAR)")))
    assert schema.names == ["a", "b"] and str(schema.field("a").type) == "int64"
    with pytest.raises(duckdb.Error, match="disabled"):
        _type_parser().execute(f"SELECT * FROM read_text('{SECRET}')").fetchall()
