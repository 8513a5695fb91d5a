"""What rules ask of operators, derived from the capabilities the IR declares.

The IR declares ``calls_llm``, ``row_preserving``, ``row_wise``, ``drops_rows_only`` and
``columns_read`` (``Node``, ``SemanticNode``); rules
need a few facts built from them (which columns a semantic operator adds, whether a filter
may cross it). They live here, in one place, instead of ``isinstance`` chains in each rule.

>>> from semray.operators import Schema, SemMap, Scan, SourceSpec
>>> scan = Scan(source=SourceSpec(kind="memory", options={"name": "t"}), source_schema=Schema.of(("text", "VARCHAR")))
>>> sorted(added_columns(SemMap(input=scan, instruction="{text}", output="summary")))
['summary']
"""

from __future__ import annotations

from semray.operators.base import Node
from semray.operators.relational import Unary
from semray.operators.semantic import Semantic, is_row_semantic
from semray.sql_quoting import quote_identifier


def is_row_wise_semantic(node: Node) -> bool:
    """A semantic operator that answers each input row on its own (filter, map, extract, classify)."""
    return is_row_semantic(node)


def keeps_every_row(node: Node) -> bool:
    """Each input row yields exactly one output row, whatever the model answers.

    A semantic operator with ``on_error="skip"`` drops the rows its model fails on, so it
    only preserves rows when it never fails; rules do not assume that.
    """
    return node.row_preserving and not (isinstance(node, Semantic) and node.on_error == "skip")


def added_columns(node: Node) -> frozenset[str]:
    """Columns a unary operator adds to its input's (its outputs, diagnostics included)."""
    if not isinstance(node, Unary):
        return frozenset()
    return frozenset(node.output_schema.names) - frozenset(node.input.output_schema.names)


def passes_input_columns(node: Node) -> bool:
    """A unary operator whose output keeps every input column unchanged (plus any it adds)."""
    if not isinstance(node, Unary):
        return False
    inputs = node.input.output_schema.columns
    return node.output_schema.columns[: len(inputs)] == inputs


def rebuild(node: Node, **update: object) -> Node:
    """A copy of ``node`` with some fields replaced, validated (and its schema derived) anew.

    ``model_copy`` would carry the cached output schema over to the copy; this does not.
    """
    fields = {name: getattr(node, name) for name in type(node).model_fields}
    return type(node).model_validate({**fields, **update})


def semantic_signature(node: Node) -> tuple[object, ...] | None:
    """What makes two semantic operators compute the same values: operator, template, tier
    and every other argument except their input and the names of their outputs.

    None for nodes that do not call a model.
    """
    if not node.calls_llm:
        return None
    dumped = node.model_dump(exclude={"input", "left", "right", "output", "diagnostics"})
    return tuple(sorted((key, repr(value)) for key, value in dumped.items()))


def drops_rows_only(node: Node) -> bool:
    """A parent whose output is a subset of its first input's rows, unchanged and in the same
    columns: a ``Filter``, a ``SemFilter`` without diagnostics, a semi or anti join.

    Each of these decides per row of its first input, so a row-wise operator below it may
    move above it when the decision does not read that operator's outputs.
    """
    if not node.children or not node.drops_rows_only():
        return False
    return node.output_schema == node.children[0].output_schema


def column_expression(name: str) -> str:
    """A SQL expression reading column ``name``: bare when that is unambiguous, else quoted."""
    if name.isidentifier() and name.islower() and name not in _RESERVED:
        return name
    return quote_identifier(name)


def _reserved_words() -> frozenset[str]:
    from sqlglot.dialects.duckdb import DuckDB

    keywords = DuckDB.Tokenizer.KEYWORDS
    return frozenset(word.lower() for word in keywords if word.replace("_", "").isalpha())


_RESERVED = _reserved_words()
