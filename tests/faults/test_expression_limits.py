"""Fault corpus for the size of plan expressions (issue 26): a very long OR chain, deep parentheses
or a run of NOTs is refused with an ``ExpressionLimitError`` naming the limit and the size, from
the Python builder, a JSON plan and SQL, before any parser or binder sees it; a large but
reasonable expression (500 ORs, a long IN list) still builds and evaluates. No Ray.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlglot

import semray
from semray.catalog.segment_filter import checked_where
from semray.errors import ExpressionLimitError, PlanError, SearchError
from semray.operators import safe_sql
from semray.operators.expression_limits import (
    MAX_EXPRESSION_CHARS,
    MAX_EXPRESSION_NESTING,
    MAX_EXPRESSION_OPERATORS,
    check_expression_size,
    measure_expression,
)
from semray.operators.serialize import plan_from_json
from semray.pipeline.workers.batch_sql import run_sql
from semray.sql import SqlLimitError, compile_sql
from semray.sql.limits import MAX_QUERY_CHARS, MAX_QUERY_OPERATORS

pytestmark = pytest.mark.timeout(60)


def ors(count: int) -> str:
    return " OR ".join(f"a = {i}" for i in range(count))


LENGTH = rf"is [\d,]+ characters long, more than the {MAX_EXPRESSION_CHARS:,}"
OPERATORS = rf"has [\d,]+ operators .* more than the {MAX_EXPRESSION_OPERATORS:,}"
NESTING = rf"nests [\d,]+ levels deep, more than the {MAX_EXPRESSION_NESTING}"

# (id, expression, what the message must say, including the measured size)
OVERSIZED = [
    ("or-120k", ors(120_000), (LENGTH, "1,568,886 characters", "table and join")),
    ("or-20k", ors(20_000), (OPERATORS, "39,999 operators", r"IN \(1, 2")),
    ("or-just-past", ors(MAX_EXPRESSION_OPERATORS // 2 + 1), (OPERATORS,)),
    ("and-10k", " AND ".join(["a > 1"] * 10_000), (OPERATORS, "19,999 operators")),
    ("plus-10k", " + ".join(["a"] * 10_000) + " > 1", (OPERATORS,)),
    ("concat-10k", " || ".join(["b"] * 10_000) + " = 'x'", (OPERATORS,)),
    ("parens-10k", "(" * 10_000 + "a > 1" + ")" * 10_000, (NESTING, "10,000 levels")),
    ("parens-1000", "(" * 1000 + "a > 1" + ")" * 1000, (NESTING, "1,000 levels")),
    ("parens-just-past", "(" * (MAX_EXPRESSION_NESTING + 1) + "a > 1" + ")" * (MAX_EXPRESSION_NESTING + 1), (NESTING,)),
    ("not-10k", "NOT " * 10_000 + "a > 1", (NESTING, "10,000 levels", "NOT")),
    ("minus-10k", "- " * 10_000 + "a > 1", (NESTING,)),
    ("functions-10k", "abs(" * 10_000 + "a" + ")" * 10_000 + " > 1", (NESTING,)),
    ("case-200", "CASE WHEN a > 1 THEN " * 200 + "1" + " END" * 200 + " = 1", (NESTING, "CASE")),
    ("lists-5000", "[" * 5000 + "a" + "]" * 5000 + " IS NULL", (NESTING,)),
    ("unclosed-parens-10k", "(" * 10_000 + "a > 1", (NESTING,)),
    ("in-list-300kib", "a IN (" + ",".join(["1234567"] * 40_000) + ")", (LENGTH, "320,006 characters")),
    ("string-300kib", "b = '" + "x" * 300_000 + "'", (LENGTH,)),
]

# Within the limits, and each more than any hand-written predicate: (id, expression, rows kept of a = 1, 2, 3)
REASONABLE = [
    ("or-500", ors(500), [1, 2, 3]),
    ("or-500-misses", " OR ".join(f"a = {i}" for i in range(10, 510)), []),
    ("in-list-5000", "a IN (" + ",".join(map(str, range(2, 5_002))) + ")", [2, 3]),
    ("parens-at-limit", "(" * MAX_EXPRESSION_NESTING + "a > 1" + ")" * MAX_EXPRESSION_NESTING, [2, 3]),
    ("not-8", "NOT " * 8 + "a > 1", [2, 3]),
    ("quoted-operators", "b <> '" + " OR (" * 5000 + "' AND a > 1", [2, 3]),
    ("commented-operators", "a > 2 /* " + " OR (" * 5000 + " */", [3]),
]


@pytest.fixture(scope="module")
def csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("limits") / "t.csv"
    path.write_text("a,b\n1,x\n2,y\n3,zz\n", encoding="utf-8")
    return path


def refuse_to_parse(monkeypatch: pytest.MonkeyPatch, expression: str) -> None:
    """Fail the test if sqlglot or DuckDB is asked to parse ``expression``: an oversized one must be
    refused before either parser sees it (the parsers are what take minutes)."""
    parse_one, duckdb_parse = sqlglot.parse_one, safe_sql._duckdb_parse

    def checked_parse_one(sql: str, *args: Any, **kwargs: Any) -> Any:
        assert expression not in sql, "an oversized expression reached sqlglot"
        return parse_one(sql, *args, **kwargs)

    def checked_duckdb_parse(sql: str) -> Any:
        assert expression not in sql, "an oversized expression reached DuckDB's parser"
        return duckdb_parse(sql)

    monkeypatch.setattr(sqlglot, "parse_one", checked_parse_one)
    monkeypatch.setattr(safe_sql, "_duckdb_parse", checked_duckdb_parse)
    safe_sql._problem.cache_clear()


def _filter_plan(csv: Path, predicate: str) -> str:
    document = json.loads(semray.read_csv(csv).filter("a > 0").to_json())
    document["plan"]["predicate"] = predicate
    return json.dumps(document)


def _check_message(message: str, patterns: tuple[str, ...]) -> None:
    for pattern in patterns:
        assert re.search(pattern, message), (pattern, message[:300])


@pytest.mark.parametrize(("expression", "patterns"), [case[1:] for case in OVERSIZED], ids=[c[0] for c in OVERSIZED])
def test_python_builder_refuses_before_parsing(
    csv: Path, monkeypatch: pytest.MonkeyPatch, expression: str, patterns: tuple[str, ...]
) -> None:
    query = semray.read_csv(csv)
    refuse_to_parse(monkeypatch, expression)
    with pytest.raises(ExpressionLimitError) as caught:
        query.filter(expression)
    _check_message(str(caught.value), (r"^Filter: ", *patterns))
    with pytest.raises(ExpressionLimitError):
        query.select("a", x=expression)


@pytest.mark.parametrize(("expression", "patterns"), [case[1:] for case in OVERSIZED], ids=[c[0] for c in OVERSIZED])
def test_json_plan_refuses_before_parsing(
    csv: Path, monkeypatch: pytest.MonkeyPatch, expression: str, patterns: tuple[str, ...]
) -> None:
    document = _filter_plan(csv, expression)
    refuse_to_parse(monkeypatch, expression)
    with pytest.raises(PlanError) as caught:
        plan_from_json(document)
    assert isinstance(caught.value, ExpressionLimitError)
    _check_message(str(caught.value), ("plan.filter", *patterns))


@pytest.mark.parametrize(("expression", "patterns"), [case[1:] for case in OVERSIZED], ids=[c[0] for c in OVERSIZED])
def test_sql_refuses(csv: Path, expression: str, patterns: tuple[str, ...]) -> None:
    """The SQL surface refuses each with its own limits (length, operators, nesting, depth)."""
    query = f"SELECT * FROM t WHERE {expression}"
    with pytest.raises(SqlLimitError) as caught:
        compile_sql(query, {"t": semray.read_csv(csv).plan})
    assert re.search(r"more than the [\d,]+|more than \d+ levels", str(caught.value))


@pytest.mark.parametrize(("expression", "kept"), [case[1:] for case in REASONABLE], ids=[c[0] for c in REASONABLE])
def test_reasonable_expressions_build_and_evaluate(csv: Path, expression: str, kept: list[int]) -> None:
    query = semray.read_csv(csv).filter(expression)
    assert query.plan.output_schema.names == ("_rowid", "a", "b")
    assert plan_from_json(_filter_plan(csv, expression)) == query.plan
    batch = pa.table({"a": [1, 2, 3], "b": ["x", "y", "zz"]})
    assert run_sql(batch, f"SELECT a FROM batch WHERE {expression}").column("a").to_pylist() == kept


def test_sql_surface_keeps_500_terms_working_as_in_list(csv: Path) -> None:
    """SQL refuses a 500-term OR chain by its own depth limit (256) with advice to write IN, and the
    IN list it advises compiles."""
    tables = {"t": semray.read_csv(csv).plan}
    with pytest.raises(SqlLimitError, match=r"IN \(a, b"):
        compile_sql(f"SELECT * FROM t WHERE {ors(500)}", tables)
    values = ", ".join(map(str, range(500)))
    assert compile_sql(f"SELECT * FROM t WHERE a IN ({values})", tables).output_schema.names[-2:] == ("a", "b")


def test_sql_query_past_the_operator_limit_is_refused_before_sqlglot(
    csv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlglot.dialects.dialect import Dialect

    query = "SELECT a FROM t WHERE " + " OR ".join(["a = 1"] * 17_000)
    assert len(query) < MAX_QUERY_CHARS
    monkeypatch.setattr(Dialect, "tokenize", _never)
    with pytest.raises(SqlLimitError, match=rf"has 33,999 operators .* more than the {MAX_QUERY_OPERATORS:,}"):
        compile_sql(query, {"t": semray.read_csv(csv).plan})


def _never(*args: object, **kwargs: object) -> None:
    raise AssertionError("the query reached sqlglot's tokenizer")


def test_limit_boundaries_are_exact() -> None:
    at = " + ".join(["a"] * (MAX_EXPRESSION_OPERATORS + 1))
    assert measure_expression(at) == (MAX_EXPRESSION_OPERATORS, 0)
    assert measure_expression("- - a - (b + -c) * [d][1]") == (6, 2)
    check_expression_size(at, "Project")
    with pytest.raises(ExpressionLimitError, match=f"has {MAX_EXPRESSION_OPERATORS + 1:,} operators"):
        check_expression_size(at + " + a", "Project")
    check_expression_size("x" * MAX_EXPRESSION_CHARS, "Project")
    with pytest.raises(ExpressionLimitError, match=f"{MAX_EXPRESSION_CHARS + 1:,} characters"):
        check_expression_size("x" * (MAX_EXPRESSION_CHARS + 1), "Project")


def test_segment_search_where_is_a_search_error() -> None:
    with pytest.raises(SearchError, match="levels deep"):
        checked_where("(" * 5000 + "level = 'chunk'" + ")" * 5000)
