"""SQL predicates as conjunctions: split into conjuncts, see what each reads, join back.

>>> split_conjuncts("rating >= 4 AND (product = 'a' OR product = 'b')")
['rating >= 4', "product = 'a' OR product = 'b'"]
>>> join_conjuncts(["rating >= 4", "x = 1"])
'(rating >= 4) AND (x = 1)'
"""

from __future__ import annotations

from sqlglot import exp

from semray.operators.expressions import DIALECT, parse_expression, referenced_columns


def split_conjuncts(predicate: str) -> list[str]:
    """The top-level AND terms of a predicate; the predicate itself when it has none."""
    tree = parse_expression(predicate, "Filter")
    if not isinstance(tree, exp.And):
        return [predicate]
    return [part.unnest().sql(dialect=DIALECT) for part in tree.flatten()]


def join_conjuncts(conjuncts: list[str]) -> str:
    """One predicate from conjuncts (the single one unchanged)."""
    if len(conjuncts) == 1:
        return conjuncts[0]
    return " AND ".join(f"({part})" for part in conjuncts)


def predicate_columns(predicate: str) -> frozenset[str]:
    """Column names a predicate reads, side qualifiers dropped."""
    return frozenset(referenced_columns(parse_expression(predicate, "Filter")))
