"""SEM_CODE in SQL: a whole SELECT item expanding to its output fields."""

from __future__ import annotations

import pytest

from semray.errors import PlanError
from semray.operators import Node, Project, Scan, Schema, SourceSpec
from semray.operators.code import SemCode
from semray.sql import compile_sql

CODE = "import pandas as pd\ndef transform(batch):\n    return pd.DataFrame({'day': batch['raw']})\n"


@pytest.fixture
def tables() -> dict[str, Node]:
    schema = Schema.of(("id", "BIGINT"), ("raw", "VARCHAR"))
    return {"d": Scan(source=SourceSpec(kind="csv", path="/data/d.csv"), source_schema=schema)}


def test_sem_code_expands_to_its_fields(tables: dict[str, Node]) -> None:
    plan = compile_sql("SELECT id, SEM_CODE('Parse {d.raw} as a date', 'day: date, year: int') FROM d", tables)
    assert isinstance(plan, Project) and [e.name for e in plan.exprs] == ["id", "day", "year"]
    code = plan.input
    assert isinstance(code, SemCode) and code.inputs == ("raw",) and code.instruction == "Parse {raw} as a date"
    assert code.code is None and [f.type for f in code.outputs] == ["date", "int"]


def test_sem_code_takes_the_function_text(tables: dict[str, Node]) -> None:
    escaped = CODE.replace("'", "''")
    plan = compile_sql(f"SELECT SEM_CODE('Copy {{raw}}', 'day: text', '{escaped}') FROM d", tables)
    assert isinstance(plan, Project) and isinstance(plan.input, SemCode)
    assert plan.input.code == CODE and plan.input.origin == "user"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT SEM_CODE('Parse {raw}') FROM d", "SEM_CODE without output fields"),
        ("SELECT SEM_CODE('Parse {raw}', 'day: date') AS x FROM d", "an alias on SEM_CODE"),
        ("SELECT SEM_CODE('Parse {rwa}', 'day: date') FROM d", "did you mean 'raw'"),
        ("SELECT SEM_CODE('Parse it', 'day: date') FROM d", "reference the input columns"),
        ("SELECT * FROM d WHERE SEM_CODE('Parse {raw}', 'day: date')", "whole SELECT item"),
        ("SELECT SEM_CODE('Copy {raw}', 'day: text', 'def f(b): pass') FROM d", "no top-level function transform"),
    ],
)
def test_misuse_is_refused_with_advice(tables: dict[str, Node], query: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        compile_sql(query, tables)
