"""SELECT-list items: ``*`` expansion, output names, and the scope expressions are compiled in."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from semray.operators import ROW_ID, Node
from semray.sql.diagnostics import QueryText
from semray.sql.rewrite import EXPANDING_FUNCTIONS, Replacement, semantic_name, to_sql
from semray.sql.scope import Relation


@dataclass(frozen=True, slots=True)
class SelectItem:
    """One output column of a SELECT (a ``SEM_EXTRACT`` or ``SEM_CODE`` item stands for all its fields)."""

    expression: exp.Expr
    name: str
    alias: str | None = None
    column: str | None = None
    """The plan column a plain column reference resolves to."""

    @property
    def is_extract(self) -> bool:
        return semantic_name(self.expression) in EXPANDING_FUNCTIONS


@dataclass(frozen=True, slots=True)
class ExprScope:
    """Where SELECT-list expressions are compiled: the node so far, its SQL names, substitutions.

    Before aggregation ``relation`` is the FROM relation and ``replace`` is None; after it,
    ``relation`` holds the group keys and ``replace`` maps aggregates and key
    expressions to the Aggregate's output columns.
    """

    node: Node
    relation: Relation
    replace: Replacement | None = None
    semantic_columns: tuple[tuple[str, str], ...] = ()
    """Semantic calls already computed on ``node`` (by WHERE), as (call SQL, column) pairs."""


def select_items(select: exp.Select, relation: Relation, source: QueryText) -> list[SelectItem]:
    """The SELECT list with ``*`` and ``t.*`` expanded, each item with a unique output name."""
    raw: list[tuple[exp.Expr, str | None, str | None, str | None]] = []
    for entry in select.expressions:
        alias = entry.alias if isinstance(entry, exp.Alias) else None
        expression = entry.this if isinstance(entry, exp.Alias) else entry
        if isinstance(expression, exp.Star) or (
            isinstance(expression, exp.Column) and isinstance(expression.this, exp.Star)
        ):
            star = expression if isinstance(expression, exp.Star) else expression.this
            if star.args.get("replace") or star.args.get("rename"):
                raise source.unsupported(star, "* REPLACE/RENAME", "list the columns with their expressions")
            excluded = {column.name.lower() for column in star.args.get("except_") or []}
            qualifier = expression.table if isinstance(expression, exp.Column) else None
            for column in relation.star(qualifier or None):
                if column.name.lower() not in excluded:
                    reference = exp.column(column.name, table=column.qualifier, quoted=True)
                    raw.append((reference, None, column.name, column.plan_name))
            continue
        plan_name = None
        if isinstance(expression, exp.Column):
            plan_name = relation.resolve(expression, source).plan_name
        label = alias or (expression.name if isinstance(expression, exp.Column) else to_sql(expression))
        raw.append((expression, alias, label, plan_name))
    items: list[SelectItem] = []
    taken: set[str] = {ROW_ID}  # lower-cased: DuckDB names are case-insensitive
    for expression, alias, name, plan_name in raw:
        if (expanding := semantic_name(expression)) in EXPANDING_FUNCTIONS:
            if alias:
                raise source.unsupported(
                    expression,
                    f"an alias on {expanding}",
                    f"{expanding} expands to its fields; rename them in the field spec",
                )
            items.append(SelectItem(expression, ""))
            continue
        assert name is not None
        candidates = [name] + ([plan_name] if plan_name and not alias else [])
        chosen = next((candidate for candidate in candidates if candidate.lower() not in taken), None) or unique_name(
            name, taken
        )
        taken.add(chosen.lower())
        items.append(SelectItem(expression, chosen, alias, plan_name))
    return items


def unique_name(base: str, taken: set[str]) -> str:
    """``base`` or ``base_1``, ``base_2``, ... whose lower-cased form is not in ``taken``.

    >>> unique_name("X", {"x"})
    'X_1'
    """
    name, counter = base, 0
    while name.lower() in taken:
        counter += 1
        name = f"{base}_{counter}"
    return name


def alias_expressions(select: exp.Select) -> dict[str, exp.Expr]:
    """SELECT-list aliases (lower-cased) and their expressions."""
    return {entry.alias.lower(): entry.this for entry in select.expressions if isinstance(entry, exp.Alias)}


def substitute_aliases(condition: exp.Expr, aliases: dict[str, exp.Expr], relation: Relation) -> exp.Expr:
    """Replace references to SELECT aliases in WHERE/HAVING with the aliased expressions.

    DuckDB allows ``SELECT rating * 2 AS r FROM t WHERE r > 4``; a FROM column of the same
    name wins over an alias, as in DuckDB.
    """
    if not aliases:
        return condition

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier):
            target = aliases.get(node.name.lower())
            if target is not None and relation.find(node.name, None) is None:
                return exp.Paren(this=target.copy())
        return node

    return condition.copy().transform(swap)
