"""Number literals of a query as Python numbers: never past a 64-bit integer, and never through
``int()`` on thousands of digits (Python refuses those with a ValueError)."""

from __future__ import annotations

from sqlglot import exp

INT64_MAX = 2**63 - 1


def integer_literal(node: exp.Expr | None) -> int | None:
    """The value of an unsigned whole-number literal that fits in 64 bits, else None.

    >>> integer_literal(exp.Literal.number(3)), integer_literal(exp.Literal.number("2.5"))
    (3, None)
    """
    if not isinstance(node, exp.Literal) or node.is_string:
        return None
    text = str(node.this)
    if not (text.isascii() and text.isdigit()) or len(text.lstrip("0")) > 19:
        return None
    value = int(text)
    return value if value <= INT64_MAX else None


def number_literal(node: exp.Expr) -> int | float | None:
    """The value of a number literal: an int when it is whole and fits in 64 bits, else a float
    (``inf`` when it overflows one); None for anything but a number literal.

    >>> number_literal(exp.Literal.number("1e3")), number_literal(exp.Literal.number("9" * 5000))
    (1000.0, inf)
    """
    if not isinstance(node, exp.Literal) or node.is_string:
        return None
    whole = integer_literal(node)
    if whole is not None:
        return whole
    try:
        return float(str(node.this))
    except ValueError:
        return None


def shown(node: exp.Expr, limit: int = 24) -> str:
    """A literal's text for a message, shortened: ``99999999999999999999...``."""
    text = str(node.this) if isinstance(node, exp.Literal) else node.sql()
    return text if len(text) <= limit else text[:limit] + "..."
