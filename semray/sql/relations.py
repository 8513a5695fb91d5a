"""FROM and JOIN: tables, subqueries and CTEs become plan nodes with SQL name scopes.

Supported: ``FROM t [AS a]``, ``FROM (SELECT ...) AS s``, ``[INNER] JOIN``, ``LEFT JOIN``,
``RIGHT JOIN`` (compiled as a LEFT join with the inputs swapped), ``SEMI JOIN``,
``ANTI JOIN``, ``ON`` with at least one equality between the two sides, ``USING (...)``,
``JOIN ... ON SEM_MATCH('... {l.col} ... {r.col}')`` (a semantic join), and the semantic table
functions ``SEM_TOPK`` / ``SEM_SEARCH`` (``table_functions.py``).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import replace
from typing import cast

from sqlglot import exp

from semray.errors import ColumnNotFoundError, TableNotFoundError
from semray.operators import Filter, Join, NamedExpr, Node, Project, SemFilter
from semray.operators.relational import JoinKind
from semray.operators.schema import right_names
from semray.sql.context import Context
from semray.sql.diagnostics import UnsupportedSqlError, at_position
from semray.sql.limits import check_plan_depth
from semray.sql.rewrite import conjuncts, plan_column, plan_sql, rewrite, semantic_name, to_sql
from semray.sql.scope import Relation, ScopeColumn
from semray.sql.semantic_calls import located, sem_join
from semray.sql.table_functions import compile_table_function, table_function_name


def compile_from(select: exp.Select, context: Context) -> Relation:
    """The relation of a SELECT's FROM clause and its joins."""
    from_clause = select.args.get("from_")
    if from_clause is None:
        raise context.source.unsupported(
            select, "SELECT without FROM", "select from a table, e.g. SELECT 1 AS x FROM t LIMIT 1"
        )
    relation = from_item(from_clause.this, context)
    for join in select.args.get("joins") or []:
        relation = compile_join(relation, join, context)
        check_plan_depth(relation.node, context.source, join)  # a long chain of joins stops at the first too deep
    return relation


_FROM_ITEM_PARTS = {
    "sample": ("TABLESAMPLE on a table", "use LIMIT"),
    "pivots": ("PIVOT / UNPIVOT", "aggregate with GROUP BY"),
    "laterals": ("LATERAL", "use a JOIN"),
    "joins": ("a join inside a FROM item", "write the join after FROM"),
    "version": ("time travel (AT / VERSION)", "read the version as its own file"),
    "system_time": ("FOR SYSTEM_TIME", "read the version as its own file"),
    "changes": ("CHANGES", "give a plain table"),
    "when": ("a temporal clause", "give a plain table"),
    "ordinality": ("WITH ORDINALITY", "number rows with a column of the table"),
    "rows_from": ("ROWS FROM", "give a plain table"),
    "partition": ("PARTITION", "filter with WHERE"),
    "hints": ("table hints", "drop the hint"),
    "only": ("ONLY", "give a plain table"),
    "indexed": ("INDEXED BY", "drop the index hint"),
    "format": ("a FORMAT clause", "give a plain table"),
    "pattern": ("a PATTERN clause", "give a plain table"),
    "match": ("MATCH_RECOGNIZE", "give a plain table"),
}
"""Parts a FROM item may carry that the compiler does not apply: refused rather than ignored, so
``FROM t TABLESAMPLE 10%`` cannot silently return every row."""


def check_from_item_parts(item: exp.Expr, context: Context) -> None:
    for part, (what, instead) in _FROM_ITEM_PARTS.items():
        if item.args.get(part):
            raise context.source.unsupported(item, what, instead)


def from_item(item: exp.Expr, context: Context) -> Relation:
    source = context.source
    if isinstance(item, (exp.Table, exp.Subquery)):
        check_from_item_parts(item, context)
    if isinstance(item, exp.Table) and isinstance(item.this, exp.Identifier):
        parts = [part.name for part in item.parts]
        node = context.table(".".join(parts), item)
        return rename_columns(Relation.of_node(node, item.alias_or_name), item, context)
    if isinstance(item, exp.Table) and table_function_name(item.this) is not None:
        return rename_columns(compile_table_function(item, context), item, context)
    if isinstance(item, exp.Subquery):
        node = context.compile(item.this)
        relation = Relation.of_node(node, item.alias or "unnamed_subquery")
        return rename_columns(relation, item, context)
    raise source.unsupported(
        item, f"the FROM item {to_sql(item)[:60]!r}", "use table names, subqueries in parentheses or CTEs"
    )


def rename_columns(relation: Relation, item: exp.Expr, context: Context) -> Relation:
    """Apply an alias column list, ``FROM t AS a(x, y)``."""
    alias = item.args.get("alias")
    names = [column.name for column in alias.columns] if isinstance(alias, exp.TableAlias) else []
    if not names:
        return relation
    if len(names) > len(relation.columns):
        raise context.source.unsupported(
            item,
            f"{len(names)} column aliases for {len(relation.columns)} columns",
            "give at most one alias per column",
        )
    renamed = {c.plan_name: name for c, name in zip(relation.columns, names, strict=False)}
    exprs = tuple(
        NamedExpr(name=renamed.get(c.plan_name, c.plan_name), expr=to_sql(plan_column(c.plan_name)))
        for c in relation.columns
    )
    with located(item, context.source):
        node = Project(input=relation.node, exprs=exprs)
    return Relation.of_node(node, relation.columns[0].qualifier if relation.columns else None)


def compile_join(left: Relation, join: exp.Join, context: Context) -> Relation:
    source = context.source
    right = from_item(join.this, context)
    side, kind, method = (str(join.args.get(key) or "").upper() for key in ("side", "kind", "method"))
    if method:
        raise source.unsupported(join, f"{method} JOIN", "write the join condition with ON or USING")
    if kind == "CROSS" or (join.args.get("on") is None and not join.args.get("using")):
        raise source.unsupported(
            join.this,
            "a join without a condition (CROSS JOIN or comma-separated FROM)",
            "use JOIN ... ON with an equality between the tables",
        )
    if side == "FULL":
        raise source.unsupported(join, "FULL OUTER JOIN", "use an inner, LEFT, RIGHT, SEMI or ANTI join")
    if kind in ("SEMI", "ANTI"):
        plan_kind = kind.lower()
    elif side == "LEFT":
        plan_kind = "left"
    elif side == "RIGHT":
        plan_kind = "right"
    else:
        plan_kind = "inner"
    condition = join.args.get("on")
    if condition is None:
        left, right, condition = using_condition(left, right, join, plan_kind, context)
    parts = conjuncts(condition)
    matches = [part for part in parts if semantic_name(part) == "SEM_MATCH"]
    if matches:
        return semantic_join(left, right, matches, [p for p in parts if p not in matches], plan_kind, join, context)
    if plan_kind == "right":
        swapped = relational_join(right, left, parts, "left", join, context, flipped=True)
        return reorder_swapped(swapped, left, right)
    return relational_join(left, right, parts, plan_kind, join, context)


def using_condition(
    left: Relation, right: Relation, join: exp.Join, kind: str, context: Context
) -> tuple[Relation, Relation, exp.Expr]:
    """``USING (id)`` -> ``left.id = right.id``; ``*`` shows the preserved side's copy only."""
    pairs: list[exp.Expr] = []
    hidden_left: set[str] = set()
    hidden_right: set[str] = set()
    for identifier in join.args["using"]:
        name = identifier.name
        found_left, found_right = left.find(name, None), right.find(name, None)
        if found_left is None or found_right is None:
            relation = right if found_left is not None else left
            error = ColumnNotFoundError(name, [c.name for c in relation.star()], "USING")
            raise at_position(error, context.source.locate(identifier))
        pairs.append(exp.EQ(this=_reference(found_left), expression=_reference(found_right)))
        (hidden_left if kind == "right" else hidden_right).add(name)
    left = replace(
        left, columns=tuple(replace(c, in_star=c.in_star and c.name not in hidden_left) for c in left.columns)
    )
    right = replace(
        right, columns=tuple(replace(c, in_star=c.in_star and c.name not in hidden_right) for c in right.columns)
    )
    condition: exp.Expr = exp.and_(*pairs)
    return left, right, condition


def _reference(column: ScopeColumn) -> exp.Column:
    return exp.column(column.name, table=column.qualifier, quoted=True)


def side_resolver(
    left: Relation, right: Relation, context: Context, used: set[str]
) -> Callable[[exp.Column], exp.Expr]:
    """Resolve a reference to ``l.<plan column>`` or ``r.<plan column>``, recording the side."""

    def resolve(column: exp.Column) -> exp.Expr:
        qualifier = column.table or None
        candidates = []
        for side, relation in (("l", left), ("r", right)):
            if qualifier is not None and not relation.has_qualifier(qualifier):
                continue
            found = relation.find(column.name, qualifier)
            if found is not None:
                candidates.append((side, found))
        if qualifier is not None and not (left.has_qualifier(qualifier) or right.has_qualifier(qualifier)):
            error = TableNotFoundError(qualifier, left.qualifiers + right.qualifiers)
            raise at_position(error, context.source.locate(column))
        if len(candidates) > 1:
            raise UnsupportedSqlError(
                f"column reference {column.name!r} in the join condition (at {context.source.locate(column)})"
                " is ambiguous; qualify it"
            )
        if not candidates:
            names = [
                c.name for c in (left.star(qualifier) if qualifier and left.has_qualifier(qualifier) else left.star())
            ]
            names += [
                c.name
                for c in (right.star(qualifier) if qualifier and right.has_qualifier(qualifier) else right.star())
            ]
            raise ColumnNotFoundError(column.name, names, f"the join condition (at {context.source.locate(column)})")
        side, found = candidates[0]
        used.add(side)
        return plan_column(found.plan_name, table=side)

    return resolve


def relational_join(
    left: Relation,
    right: Relation,
    parts: list[exp.Expr],
    kind: str,
    join: exp.Join,
    context: Context,
    *,
    flipped: bool = False,
) -> Relation:
    source = context.source
    on: list[str] = []
    right_only: list[exp.Expr] = []
    left_only: list[exp.Expr] = []
    for part in parts:
        used: set[str] = set()
        text = to_sql(rewrite(part, side_resolver(left, right, context, used), source))
        if kind != "inner" and used == {"r"}:
            right_only.append(part)
        elif kind == "semi" and used == {"l"}:
            left_only.append(part)
        elif kind != "inner" and used != {"l", "r"}:
            shown = "RIGHT" if flipped else kind.upper()
            raise source.unsupported(
                part,
                f"the {shown} JOIN condition {to_sql(part)!r} over one table only",
                "filter that table in a subquery, or use an inner join",
            )
        else:
            on.append(text)
    if right_only:
        predicate = " AND ".join(f"({plan_sql(part, right, source)})" for part in right_only)
        with located(join, source):
            right = right.with_node(Filter(input=right.node, predicate=predicate))
    if left_only:
        predicate = " AND ".join(f"({plan_sql(part, left, source)})" for part in left_only)
        with located(join, source):
            left = left.with_node(Filter(input=left.node, predicate=predicate))
    if not on:
        raise source.unsupported(
            join, "a join without an equality between the two tables", "add ON left.column = right.column"
        )
    condition = on[0] if len(on) == 1 else " AND ".join(f"({text})" for text in on)
    with located(join, source):
        node = Join(left=left.node, right=right.node, kind=cast(JoinKind, kind), on=condition)
    if kind in ("semi", "anti"):
        return left.with_node(node)
    return joined_relation(node, left, right, node.right_names)


def joined_relation(node: Node, left: Relation, right: Relation, names: dict[str, str]) -> Relation:
    columns = left.columns + tuple(replace(c, plan_name=names[c.plan_name]) for c in right.columns)
    return Relation(node, columns)


def reorder_swapped(swapped: Relation, left: Relation, right: Relation) -> Relation:
    """A RIGHT join compiled as ``right LEFT JOIN left``: list the SQL-left columns first again."""
    count = len(right.columns)
    return Relation(swapped.node, swapped.columns[count:] + swapped.columns[:count])


def semantic_join(
    left: Relation,
    right: Relation,
    matches: list[exp.Expr],
    rest: list[exp.Expr],
    kind: str,
    join: exp.Join,
    context: Context,
) -> Relation:
    """``ON SEM_MATCH(...) [AND ...]``: a SemJoin, or a Join plus SemFilter when an equality is given."""
    source = context.source
    if kind != "inner":
        raise source.unsupported(join, f"SEM_MATCH in a {kind.upper()} JOIN", "use SEM_MATCH in an inner JOIN")
    if len(matches) > 1:
        raise source.unsupported(
            matches[1], "several SEM_MATCH conditions in one join", "combine them into one instruction"
        )
    for part in rest:
        if any(semantic_name(node) for node in part.walk() if isinstance(node, exp.Expr)):
            raise source.unsupported(
                part, "a semantic function inside a join condition", "use one SEM_MATCH(...) conjunct"
            )
    semantic = sem_join(left, right, matches[0], source)
    has_equality = any(_is_equality(part, left, right, context) for part in rest)
    if has_equality:
        joined = relational_join(left, right, rest, "inner", join, context)
        names = right_names(left.node.output_schema, right.node.output_schema)
        instruction = _rename_sides(semantic.instruction, names)
        with located(matches[0], source):
            return joined.with_node(SemFilter(input=joined.node, instruction=instruction))
    relation = joined_relation(semantic, left, right, right_names(left.node.output_schema, right.node.output_schema))
    if rest:
        predicate = " AND ".join(f"({plan_sql(part, relation, source)})" for part in rest)
        with located(join, source):
            relation = relation.with_node(Filter(input=relation.node, predicate=predicate))
    return relation


def _is_equality(part: exp.Expr, left: Relation, right: Relation, context: Context) -> bool:
    if not (isinstance(part, exp.EQ) and isinstance(part.this, exp.Column) and isinstance(part.expression, exp.Column)):
        return False
    sides: set[str] = set()
    rewrite(part, side_resolver(left, right, context, sides), context.source)
    return sides == {"l", "r"}


def _rename_sides(instruction: str, names: dict[str, str]) -> str:
    """``{l.a} {r.a}`` -> ``{a} {a_right}``: a SemJoin template as a template over the joined rows."""
    parts: list[str] = []
    for literal_text, field, _, _ in string.Formatter().parse(instruction):
        parts.append(literal_text.replace("{", "{{").replace("}", "}}"))
        if field is not None:
            side, _, column = field.partition(".")
            parts.append("{" + (column if side == "l" else names[column]) + "}")
    return "".join(parts)
