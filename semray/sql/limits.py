"""Size limits of SQL queries, checked before and after parsing so that a huge or deeply nested
query fails with a SqlLimitError instead of a RecursionError deep inside the parser or compiler.

Parsing and compiling walk the query recursively: each level of parentheses costs the parser
about twenty Python frames, each level of an expression a few. The limits keep a query well
inside Python's recursion limit wherever it is compiled (CLI, notebook, Ray worker).
"""

from __future__ import annotations

from sqlglot import Token, TokenType, exp

from semray.operators import Node
from semray.operators.expression_limits import MAX_EXPRESSION_OPERATORS, measure_expression
from semray.operators.serialize import MAX_PLAN_DEPTH
from semray.sql.diagnostics import QueryText, SqlLimitError

MAX_QUERY_CHARS = 256 * 1024
"""The longest query text, in characters (262,144; a plan expression may be as long). Tokenizing
and parsing cost about a minute per megabyte of text here, so longer text is refused unread."""
MAX_QUERY_OPERATORS = 4 * MAX_EXPRESSION_OPERATORS
"""The most operators (AND, OR, NOT, comparisons, arithmetic; not commas) a query may have,
counted with DuckDB's tokenizer before sqlglot parses it: 16,384, room for several expressions
at the plan-expression limit. A chain of 120,000 ORs is refused in a fraction of a second."""
MAX_PAREN_DEPTH = 24
"""How deeply parentheses may nest: subqueries, function calls and grouping all count, and so do
brackets (``[[x]]``, ``{'a': ...}``), ``CASE ... END`` and runs of prefix operators (``NOT NOT x``,
``- -x``), which the parser also descends into one level at a time."""
MAX_EXPRESSION_DEPTH = 256
"""How deep the parsed query may be: a chain of N ``OR``s, ``+``s or ``UNION``s is about N deep."""
# The compiled plan nests at most MAX_PLAN_DEPTH operators, as a JSON plan does: planning, EXPLAIN
# and serialization walk plans recursively, and a run journals its plan as JSON to resume it.

_OPENING = frozenset({TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE, TokenType.CASE})
_CLOSING = frozenset({TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE, TokenType.END})
_PREFIX = frozenset({TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE})


def check_length(text: str) -> None:
    """Refuse query text longer than MAX_QUERY_CHARS, before it is tokenized."""
    if len(text) > MAX_QUERY_CHARS:
        raise SqlLimitError(
            f"the query is {len(text):,} characters long, more than the {MAX_QUERY_CHARS:,} the SQL surface reads; "
            "put long value lists in a table and join it, or split the query"
        )


def check_operators(text: str) -> None:
    """Refuse a query with more than MAX_QUERY_OPERATORS operators, before sqlglot tokenizes it."""
    operators, _ = measure_expression(text)
    if operators > MAX_QUERY_OPERATORS:
        raise SqlLimitError(
            f"the query has {operators:,} operators (AND, OR, NOT, comparisons, arithmetic), more than the "
            f"{MAX_QUERY_OPERATORS:,} the SQL surface reads; write col = a OR col = b ... as col IN (a, b, ...), "
            "put the values in a table and join it, or split the query"
        )


def check_nesting(tokens: list[Token], source: QueryText) -> None:
    """Refuse parentheses nested more than MAX_PAREN_DEPTH deep, before parsing.

    >>> from sqlglot.dialects.duckdb import DuckDB
    >>> check_nesting(DuckDB().tokenize("SELECT ((1))"), QueryText("SELECT ((1))"))
    """
    depth = run = 0
    for token in tokens:
        kind = token.token_type
        run = run + 1 if kind in _PREFIX else 0
        if kind in _OPENING:
            depth += 1
        elif kind in _CLOSING:
            depth = max(depth - 1, 0)
        if depth + run > MAX_PAREN_DEPTH:
            raise SqlLimitError(
                f"the query nests more than {MAX_PAREN_DEPTH} levels deep (at {source.position(token.start)}), "
                "more than the SQL surface compiles (parentheses, CASE ... END and repeated NOT or minus each "
                "count); drop redundant parentheses and operators, or move nested subqueries into WITH clauses"
            )


def check_depth(tree: exp.Expr, source: QueryText) -> None:
    """Refuse a parsed query deeper than MAX_EXPRESSION_DEPTH (walked without recursion)."""
    stack: list[tuple[exp.Expr, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_EXPRESSION_DEPTH:
            raise SqlLimitError(
                f"the query nests more than {MAX_EXPRESSION_DEPTH} levels deep (at {source.locate(node)}), "
                "more than the SQL surface compiles (a chain of OR, AND, +, || or UNION adds a level per term); "
                "write col = a OR col = b ... as col IN (a, b, ...), or split the query with WITH clauses"
            )
        stack.extend((child, depth + 1) for child in node.iter_expressions())


def check_plan_depth(plan: Node, source: QueryText, at: exp.Expr | None = None) -> None:
    """Refuse a compiled plan that nests more than MAX_PLAN_DEPTH operators (walked without
    recursion): a long chain of WITH clauses or joins compiles to one operator or more per step."""
    stack: list[tuple[Node, int]] = [(plan, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_PLAN_DEPTH:
            where = f" (at {source.locate(at)})" if at is not None else ""
            raise SqlLimitError(
                f"the query compiles to a plan more than {MAX_PLAN_DEPTH} operators deep{where}, more than semray "
                "runs (a plan is journaled as JSON, which nests at most that many); chain fewer WITH clauses, "
                "joins or subqueries, or run the query in steps, each written to a file that the next one reads"
            )
        stack.extend((child, depth + 1) for child in node.children)


def too_complex() -> SqlLimitError:
    """The error for a query that still ran out of recursion while compiling (a backstop)."""
    return SqlLimitError(
        "the query is too deeply nested to compile (Python ran out of recursion depth); "
        f"keep parentheses under {MAX_PAREN_DEPTH} levels and expressions under {MAX_EXPRESSION_DEPTH}, "
        "or split the query with WITH clauses"
    )
