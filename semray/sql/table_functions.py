"""Semantic table functions in FROM: ``SEM_TOPK`` (rank rows by an instruction) and ``SEM_SEARCH``.

Both take a relation first — a table name, a CTE name or a subquery in parentheses — and give
that relation's columns plus one more, so they stand wherever a table can (alias, joins,
WHERE, GROUP BY and ORDER BY over them):

* ``SEM_TOPK(relation, 'instruction over {column}', k)`` -> ``SemTopK``: the k rows that best
  satisfy the instruction, with their rank 1..k in ``rank``;
* ``SEM_SEARCH(relation, 'column', 'query', k [, 'vector' | 'fts' | 'hybrid' [, 'level']])`` ->
  ``SemSearch``: the k rows of ``column`` nearest to the query, with their ``score``; over catalogued
  documents a level (``'section'``, ``'paragraph'``, ...) gives the k best segments of that level
  instead, each with its document's row, ``segment_path``, ``segment_start``/``segment_end`` and text.

>>> compile_sql("SELECT * FROM SEM_TOPK(reviews, 'the most urgent {review}', 3)")  # doctest: +SKIP
"""

from __future__ import annotations

from sqlglot import exp

from semray.operators import Node, SemSearch, SemTopK
from semray.operators.catalogued import SEGMENT_LEVELS
from semray.sql.context import Context
from semray.sql.literals import integer_literal, shown
from semray.sql.rewrite import TABLE_FUNCTIONS
from semray.sql.scope import Relation
from semray.sql.semantic_calls import located, relation_resolver, rewrite_template

USAGE = {
    "SEM_TOPK": "FROM SEM_TOPK(table or (subquery), 'instruction over {column}', k)",
    "SEM_SEARCH": (
        "FROM SEM_SEARCH(table or (subquery), 'column', 'query', k [, 'vector' | 'fts' | 'hybrid' "
        f"[, {' | '.join(repr(level) for level in SEGMENT_LEVELS)}]])"
    ),
}
SEARCH_MODES = ("vector", "fts", "hybrid")


def table_function_name(node: exp.Expr) -> str | None:
    """``SEM_TOPK`` for a ``sem_topk(...)`` call, None for anything else."""
    if isinstance(node, exp.Anonymous) and isinstance(node.this, str) and node.this.upper() in TABLE_FUNCTIONS:
        return node.this.upper()
    return None


def compile_table_function(item: exp.Table, context: Context) -> Relation:
    """The relation of ``FROM SEM_TOPK(...)`` / ``FROM SEM_SEARCH(...)`` (``item.this`` is the call)."""
    call = item.this
    name = table_function_name(call)
    assert name is not None
    arguments = list(call.expressions)
    if not arguments:
        raise context.source.unsupported(call, f"{name} without arguments", f"write {USAGE[name]}")
    relation = _input_relation(arguments[0], call, name, context)
    with located(call, context.source):
        node = (
            _sem_topk(relation, arguments, call, context)
            if name == "SEM_TOPK"
            else _sem_search(relation, arguments, call, context)
        )
    return Relation.of_node(node, item.alias_or_name if item.alias else relation_qualifier(relation))


def relation_qualifier(relation: Relation) -> str | None:
    return relation.columns[0].qualifier if relation.columns else None


def _input_relation(argument: exp.Expr, call: exp.Expr, name: str, context: Context) -> Relation:
    if isinstance(argument, exp.Column) and not argument.table:
        node = context.table(argument.name, argument)
        return Relation.of_node(node, argument.name)
    if isinstance(argument, exp.Subquery):
        return Relation.of_node(context.compile(argument.this), argument.alias or name.lower())
    raise context.source.unsupported(
        argument,
        f"the first argument {shown(argument, 40)!r} of {name}",
        f"pass a table name or (subquery): {USAGE[name]}",
    )


def _sem_topk(relation: Relation, arguments: list[exp.Expr], call: exp.Expr, context: Context) -> Node:
    if len(arguments) != 3:
        raise context.source.unsupported(
            call, f"SEM_TOPK with {len(arguments)} arguments", f"write {USAGE['SEM_TOPK']}"
        )
    template, literal = _string(arguments[1], call, "SEM_TOPK", "the instruction", context), arguments[1]
    text = rewrite_template(template, literal, relation_resolver(relation, "SEM_TOPK"), context.source, "SEM_TOPK")
    return SemTopK(input=relation.node, instruction=text, k=_count(arguments[2], call, "SEM_TOPK", context))


def _sem_search(relation: Relation, arguments: list[exp.Expr], call: exp.Expr, context: Context) -> Node:
    if len(arguments) not in (4, 5, 6):
        raise context.source.unsupported(
            call, f"SEM_SEARCH with {len(arguments)} arguments", f"write {USAGE['SEM_SEARCH']}"
        )
    column_name = _string(arguments[1], call, "SEM_SEARCH", "the column", context)
    column = relation_resolver(relation, "SEM_SEARCH")(column_name, context.source.locate(arguments[1]))
    query = _string(arguments[2], call, "SEM_SEARCH", "the query", context)
    k = _count(arguments[3], call, "SEM_SEARCH", context)
    mode = _string(arguments[4], call, "SEM_SEARCH", "the mode", context).lower() if len(arguments) >= 5 else "vector"
    if mode not in SEARCH_MODES:
        raise context.source.unsupported(
            arguments[4], f"the search mode {mode!r}", f"use one of {', '.join(SEARCH_MODES)}"
        )
    level = _string(arguments[5], call, "SEM_SEARCH", "the level", context).lower() if len(arguments) == 6 else None
    if level is not None and level not in SEGMENT_LEVELS:
        raise context.source.unsupported(
            arguments[5], f"the segment level {level!r}", f"use one of {', '.join(SEGMENT_LEVELS)}"
        )
    return SemSearch(input=relation.node, column=column, query=query, k=k, mode=mode, level=level)


def _string(argument: exp.Expr, call: exp.Expr, name: str, what: str, context: Context) -> str:
    if isinstance(argument, exp.Literal) and argument.is_string:
        return str(argument.this)
    raise context.source.unsupported(
        argument, f"{what} of {name} as {shown(argument, 40)!r}", f"pass a string literal: {USAGE[name]}"
    )


def _count(argument: exp.Expr, call: exp.Expr, name: str, context: Context) -> int:
    value = integer_literal(argument)
    if value is None or value < 1:
        raise context.source.unsupported(
            argument, f"k = {shown(argument)} in {name}", f"pass a whole number of rows >= 1: {USAGE[name]}"
        )
    return value
