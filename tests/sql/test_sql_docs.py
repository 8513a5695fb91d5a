"""Every complete example query in docs/sql.md compiles against the documented tables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from semray.operators import Node
from semray.sql import compile_sql

DOC = Path(__file__).resolve().parents[2] / "docs" / "sql.md"
EXAMPLE = re.compile(r"`((?:SELECT|WITH) [^`]+)`")


def examples() -> list[str]:
    found = [match.replace("\\|", "|") for match in EXAMPLE.findall(DOC.read_text(encoding="utf-8"))]
    return [query for query in found if "..." not in query and " FROM " in query]


def test_the_docs_have_examples() -> None:
    assert len(examples()) >= 25


@pytest.mark.parametrize("query", examples())
def test_documented_example_compiles(corpus: dict[str, Node], query: str) -> None:
    compile_sql(query, corpus)
