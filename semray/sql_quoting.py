"""SQL quoting, one rule for DuckDB, SQLite and LanceDB filters: double quotes around an
identifier, single quotes around a string literal, the quote inside doubled.

A leaf module (it imports nothing of semray), so that sources, the plan IR, the planner and the
catalog share it without importing each other.

>>> quote_identifier('a"b'), quote_literal("it's")
('"a""b"', "'it''s'")
"""

from __future__ import annotations


def quote_identifier(name: str) -> str:
    """A SQL identifier: ``quote_identifier('a"b')`` -> ``'"a""b"'``."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """A SQL string literal: ``quote_literal("it's")`` -> ``"'it''s'"``."""
    return "'" + value.replace("'", "''") + "'"
