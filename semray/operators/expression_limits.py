"""Size limits of plan expressions, checked before any parser sees the text.

Every plan expression (a filter's predicate, a projection, an aggregate, a join condition), from
every surface (JSON plan, SQL, the Python builder), is parsed by sqlglot, bound by DuckDB and
walked by the planner. Those costs grow faster than the text: a predicate of 32,000 ``OR``
terms took about 90 s to type, one of 120,000 more than 300 s, and parentheses nested past
about 40 levels exhaust Python's recursion in the parser. So a plan expression is refused with
an ``ExpressionLimitError`` that names the limit and the size, after one pass of DuckDB's
tokenizer (linear, about 0.2 s for the longest text allowed), when it is:

* longer than ``MAX_EXPRESSION_CHARS`` characters (checked before tokenizing);
* made of more than ``MAX_EXPRESSION_OPERATORS`` operators: ``AND``, ``OR``, ``NOT`` and the
  symbolic ones (comparisons, arithmetic, ``||``, ``::``), not commas or brackets, so a long
  ``IN (...)`` list costs nothing here;
* nested more than ``MAX_EXPRESSION_NESTING`` levels deep: parentheses, brackets,
  ``CASE ... END`` and each run of prefix operators (``NOT NOT x``, ``- -x``) count.

The limits sit far above any predicate a person or the SQL surface writes (the SQL surface
refuses a query nested past 24 levels or with a chain of more than 256 terms, so every
expression it compiles fits) and below where the costs bite: a filter of 500 ``OR`` terms builds
in about half a second, one of 2,000 (4,000 operators, near the limit) in one to two seconds, on
a loaded two-core machine.
"""

from __future__ import annotations

import duckdb

from semray.errors import ExpressionLimitError

MAX_EXPRESSION_CHARS = 256 * 1024
"""The longest plan expression, in characters (262,144): an ``IN`` list of some 40,000 values."""
MAX_EXPRESSION_OPERATORS = 4096
"""The most operators one plan expression may have (``a = 1 OR a = 2`` has three)."""
MAX_EXPRESSION_NESTING = 32
"""How deeply a plan expression may nest: parentheses, brackets, ``CASE ... END`` and runs of
prefix operators each count a level (the SQL surface's own limit is 24)."""

_LOGICAL = frozenset({"AND", "OR", "NOT"})
_PUNCTUATION = frozenset({"(", ")", "[", "]", "{", "}", ",", ".", ":"})
_OPENING = frozenset({"(", "[", "{", "CASE"})
_CLOSING = frozenset({")", "]", "}", "END"})
_SIGNS = frozenset({"-", "+", "~"})
_OPERANDS = frozenset({duckdb.token_type.identifier, duckdb.token_type.numeric_const, duckdb.token_type.string_const})

_ADVICE_LENGTH = "put long value lists in a table and join it, or split the expression into several steps"
_ADVICE_OPERATORS = (
    "write a = 1 OR a = 2 ... as a IN (1, 2, ...), put the values in a table and join it, "
    "or split the expression into several steps"
)
_ADVICE_NESTING = "drop redundant parentheses and repeated NOT or minus, or split the expression into several steps"


def check_expression_size(sql: str, where: str) -> None:
    """Raise ``ExpressionLimitError`` when ``sql`` passes a limit of the module doc.

    >>> check_expression_size("a = 1 OR a = 2", "Filter")
    >>> check_expression_size("(" * 40 + "a" + ")" * 40, "Filter")
    Traceback (most recent call last):
    ...
    semray.errors.ExpressionLimitError: Filter: the expression nests 40 levels deep, more than the 32 ...
    """
    if len(sql) > MAX_EXPRESSION_CHARS:
        raise ExpressionLimitError(
            f"{where}: the expression is {len(sql):,} characters long, more than the {MAX_EXPRESSION_CHARS:,} "
            f"a plan expression may be; {_ADVICE_LENGTH}"
        )
    operators, nesting = measure_expression(sql)
    if nesting > MAX_EXPRESSION_NESTING:
        raise ExpressionLimitError(
            f"{where}: the expression nests {nesting:,} levels deep, more than the {MAX_EXPRESSION_NESTING} "
            f"a plan expression may (parentheses, CASE ... END and runs of NOT or minus each count); "
            f"{_ADVICE_NESTING}"
        )
    if operators > MAX_EXPRESSION_OPERATORS:
        raise ExpressionLimitError(
            f"{where}: the expression has {operators:,} operators (AND, OR, NOT, comparisons, arithmetic), "
            f"more than the {MAX_EXPRESSION_OPERATORS:,} a plan expression may have; {_ADVICE_OPERATORS}"
        )


def measure_expression(sql: str) -> tuple[int, int]:
    """How many operators ``sql`` has and how deeply it nests, from DuckDB's tokenizer (which
    skips quoted text and comments). Text the tokenizer refuses measures 0: the parser reports it.

    >>> measure_expression("NOT (a = 1 OR b IN (1, 2))")
    (3, 2)
    """
    try:
        tokens = duckdb.tokenize(sql)
    except (duckdb.Error, RuntimeError):
        return 0, 0
    operators = depth = run = deepest = 0
    after_operand = False  # a sign after an operand is binary (a - b), elsewhere a prefix (- -b)
    for index, (start, kind) in enumerate(tokens):
        if kind == duckdb.token_type.comment:
            continue
        end = tokens[index + 1][0] if index + 1 < len(tokens) else len(sql)
        text = sql[start:end].strip().upper()
        if kind == duckdb.token_type.keyword:
            operators += text in _LOGICAL
        elif kind == duckdb.token_type.operator and text not in _PUNCTUATION:
            operators += 1
        prefix = text == "NOT" or (text in _SIGNS and not after_operand)
        run = run + 1 if prefix else 0
        after_operand = kind in _OPERANDS or text in _CLOSING
        if text in _OPENING:
            depth += 1
        elif text in _CLOSING:
            depth = max(depth - 1, 0)
        deepest = max(deepest, depth + run)
    return operators, deepest
