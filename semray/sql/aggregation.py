"""GROUP BY and aggregates: an Aggregate (or SemAgg) node and the scope after it.

Group keys that are expressions are computed by a Project below the Aggregate, since
Aggregate keys are column names. Semantic calls in group keys and aggregate arguments
(``avg(SEM_SCORE(...))``, ``GROUP BY SEM_CLASSIFY(...)``) are answered per row by a
semantic node below the Aggregate that adds one hidden column per distinct call. Each
distinct aggregate call becomes one aggregate column, named after its SELECT item when
the item is exactly that call. Afterwards, SELECT, HAVING and ORDER BY expressions see
key columns and aggregate columns only.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from semray.operators import ROW_ID, Aggregate, NamedExpr, Node, Project
from semray.sql.context import Context
from semray.sql.diagnostics import UnsupportedSqlError
from semray.sql.items import ExprScope, SelectItem, unique_name
from semray.sql.literals import integer_literal, shown
from semray.sql.projection import is_semantic_column, with_semantic_outputs
from semray.sql.rewrite import Replacement, is_aggregate, outermost, plan_column, plan_sql, semantic_name, to_sql
from semray.sql.scope import Relation, ScopeColumn
from semray.sql.semantic_calls import located, sem_agg, sem_column


def is_grouping(node: exp.Expr) -> bool:
    return is_aggregate(node) or semantic_name(node) == "SEM_AGG"


def needs_aggregation(select: exp.Select, items: Sequence[SelectItem]) -> bool:
    if select.args.get("group") is not None or select.args.get("having") is not None:
        return True
    return any(outermost(item.expression, is_grouping) for item in items)


def aggregate(
    relation: Relation,
    items: Sequence[SelectItem],
    select: exp.Select,
    extra: Sequence[exp.Expr],
    context: Context,
    computed_calls: Sequence[tuple[str, str]] = (),
) -> ExprScope:
    """Group ``relation`` by the GROUP BY keys; ``extra`` are HAVING/ORDER BY expressions.

    ``computed_calls`` are semantic calls WHERE already computed on ``relation.node``, as
    (call SQL, column) pairs; they are reused rather than asked again.
    """
    source = context.source
    key_exprs = group_expressions(select, items, relation, context)
    relation, semantic_outputs = _hoist_semantic_calls(relation, items, key_exprs, extra, context, computed_calls)
    hoisted = with_semantic_outputs(None, semantic_outputs)
    keys: dict[str, str] = {}  # plan SQL of the key expression -> key column
    computed: list[NamedExpr] = []
    key_columns: list[ScopeColumn] = []
    input_names = {name.lower() for name in relation.node.output_schema.names}
    for expression in key_exprs:
        if outermost(expression, lambda node: is_grouping(node) or _other_semantic(node)):
            raise source.unsupported(
                expression, "an aggregate or semantic function in GROUP BY", "group by columns or scalar expressions"
            )
        text = plan_sql(expression, relation, source, hoisted)
        if text in keys:
            continue
        if isinstance(expression, exp.Column):
            found = relation.resolve(expression, source)
            keys[text] = found.plan_name
            key_columns.append(found)
            continue
        if is_semantic_column(expression):
            # The semantic node below already wrote this key as a column: group by it directly.
            column = semantic_outputs[to_sql(expression)]
            keys[text] = column
            key_columns.append(ScopeColumn(None, column, column, in_star=False))
            continue
        named = next(
            (
                item.name
                for item in items
                if item.alias and _same(item.expression, expression, relation, context, hoisted)
            ),
            None,
        )
        name = unique_name(named or f"_key{len(computed)}", input_names | {n.lower() for n in keys.values()})
        computed.append(NamedExpr(name=name, expr=text))
        keys[text] = name
        key_columns.append(ScopeColumn(None, name, name, in_star=False))
    node: Node = relation.node
    if computed:
        identity = tuple(
            NamedExpr(name=c.name, expr=to_sql(plan_column(c.name))) for c in node.output_schema.user_columns()
        )
        with located(select.args.get("group"), source):
            node = Project(input=node, exprs=identity + tuple(computed))
    key_names = tuple(keys.values())
    calls: dict[str, exp.Expr] = {}
    for expression in [item.expression for item in items] + list(extra):
        for call in outermost(expression, is_grouping):
            calls.setdefault(_call_key(call, relation, context, hoisted), call)
    taken = {name.lower() for name in key_names} | {ROW_ID}
    outputs: dict[str, str] = {}
    for key, call in calls.items():
        named = next((item.name for item in items if item.expression is call or _whole_item(item, call)), None)
        name = unique_name(named or f"_agg{len(outputs)}", taken)
        taken.add(name.lower())
        outputs[key] = name
    node = _aggregate_node(node, calls, outputs, key_names, relation, select, context)
    post = _post_aggregate(relation, keys, outputs, hoisted, context)
    return ExprScope(node, Relation(node, tuple(key_columns)), post)


def _hoist_semantic_calls(
    relation: Relation,
    items: Sequence[SelectItem],
    key_exprs: Sequence[exp.Expr],
    extra: Sequence[exp.Expr],
    context: Context,
    computed_calls: Sequence[tuple[str, str]],
) -> tuple[Relation, dict[str, str]]:
    """Compute each semantic call of a GROUP BY key or an aggregate argument as a column below the Aggregate.

    ``avg(SEM_SCORE('{review}', 1, 5))`` reads one score per row, so the score is a SemMap
    column of the rows being grouped; so is a ``SEM_CLASSIFY`` key. Identical calls share one
    column. Returns the relation over the new node and each call's column (keyed by its SQL).
    """
    source = context.source
    calls: list[exp.Expr] = [call for key in key_exprs for call in outermost(key, is_semantic_column)]
    for expression in [item.expression for item in items] + list(extra):
        for aggregate_call in outermost(expression, is_grouping):
            if semantic_name(aggregate_call) != "SEM_AGG":
                calls.extend(outermost(aggregate_call, is_semantic_column))
    outputs = dict(computed_calls)
    node = relation.node
    for call in calls:
        key = to_sql(call)
        if key in outputs:
            continue
        taken = {name.lower() for name in node.output_schema.names}
        named = next(
            (
                item.name
                for item in items
                if item.alias and to_sql(item.expression) == key and item.name.lower() not in taken
            ),
            None,
        )
        name = named or unique_name(f"_sem{len(outputs)}", taken | {item.name.lower() for item in items})
        node = sem_column(node, call, name, relation, source)
        outputs[key] = name
    return relation.with_node(node), outputs


def _other_semantic(node: exp.Expr) -> bool:
    return semantic_name(node) is not None and not is_semantic_column(node)


def _aggregate_node(
    node: Node, calls: dict[str, exp.Expr], outputs: dict[str, str], keys: tuple[str, ...], relation: Relation,
    select: exp.Select, context: Context,
) -> Node:  # fmt: skip
    source = context.source
    semantic = [call for call in calls.values() if semantic_name(call) == "SEM_AGG"]
    if semantic:
        if len(calls) > 1:
            raise source.unsupported(
                semantic[0],
                "SEM_AGG together with other aggregates",
                "compute them in two subqueries and JOIN them on the group keys",
            )
        key = next(iter(calls))
        return sem_agg(node, semantic[0], keys, outputs[key], relation, source)
    aggs = tuple(NamedExpr(name=outputs[key], expr=key) for key in calls)
    with located(select, source):
        return Aggregate(input=node, keys=keys, aggs=aggs)


def group_expressions(
    select: exp.Select, items: Sequence[SelectItem], relation: Relation, context: Context
) -> list[exp.Expr]:
    """GROUP BY expressions, with ordinals (``GROUP BY 1``) and SELECT aliases replaced by their items."""
    group = select.args.get("group")
    if group is None:
        return []
    source = context.source
    for unsupported in ("rollup", "cube", "grouping_sets"):
        if group.args.get(unsupported):
            raise source.unsupported(group, f"GROUP BY {unsupported.upper().replace('_', ' ')}", "group by plain keys")
    if group.args.get("all"):
        return [
            item.expression for item in items if not outermost(item.expression, is_grouping) and not item.is_extract
        ]
    expressions: list[exp.Expr] = []
    for expression in group.expressions:
        if isinstance(expression, exp.Literal) and not expression.is_string:
            index = integer_literal(expression)
            if index is None or not 1 <= index <= len(items) or items[index - 1].is_extract:
                raise source.unsupported(
                    expression, f"GROUP BY {shown(expression)}", f"use a SELECT position between 1 and {len(items)}"
                )
            expressions.append(items[index - 1].expression)
        elif (
            isinstance(expression, exp.Column) and not expression.table and relation.find(expression.name, None) is None
        ):
            item = next((i for i in items if i.alias and i.alias.lower() == expression.name.lower()), None)
            expressions.append(item.expression if item is not None else expression)
        else:
            expressions.append(expression)
    return expressions


def _same(a: exp.Expr, b: exp.Expr, relation: Relation, context: Context, hoisted: Replacement | None) -> bool:
    try:
        return plan_sql(a, relation, context.source, hoisted) == plan_sql(b, relation, context.source, hoisted)
    except UnsupportedSqlError:
        return False


def _whole_item(item: SelectItem, call: exp.Expr) -> bool:
    return to_sql(item.expression) == to_sql(call)


def _call_key(call: exp.Expr, relation: Relation, context: Context, hoisted: Replacement | None) -> str:
    if semantic_name(call) == "SEM_AGG":
        return "SEM_AGG:" + to_sql(call)
    return plan_sql(call, relation, context.source, hoisted)


def _post_aggregate(
    relation: Relation, keys: dict[str, str], outputs: dict[str, str], hoisted: Replacement | None, context: Context
) -> Replacement:
    """The substitution used after aggregation: aggregate calls and key expressions -> columns.

    Semantic calls computed below the Aggregate (``hoisted``) count as columns of the rows
    grouped, so a ``SEM_CLASSIFY`` key in the SELECT list becomes its key column.
    """
    source = context.source

    def computed_below(part: exp.Expr) -> bool:
        return hoisted is not None and is_semantic_column(part) and hoisted(part) is not None

    def replace(node: exp.Expr) -> exp.Expr | None:
        if is_grouping(node):
            return plan_column(outputs[_call_key(node, relation, context, hoisted)])
        if isinstance(node, exp.Literal) or (semantic_name(node) is not None and not computed_below(node)):
            return None
        parts = [part for part in node.walk() if isinstance(part, exp.Expr)]
        if not any(isinstance(part, exp.Column) or computed_below(part) for part in parts):
            return None
        if any(is_grouping(part) or (semantic_name(part) is not None and not computed_below(part)) for part in parts):
            return None
        text = plan_sql(node, relation, source, hoisted)
        if text in keys:
            return plan_column(keys[text])
        if isinstance(node, exp.Column):
            raise UnsupportedSqlError(
                f"column {node.sql()!r} (at {source.locate(node)}) must appear in GROUP BY"
                " or be used in an aggregate function"
            )
        return None

    return replace
