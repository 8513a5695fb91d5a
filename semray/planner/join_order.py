"""Join ordering: dynamic programming over the join graph of each region of inner joins.

A *region* is a maximal tree of inner joins (relational ``Join`` of kind inner, and
``SemJoin``); its *relations* are the subtrees below it (ordered recursively on their own),
its *predicates* the join conditions and semantic join instructions. For regions of 3 to
`MAX_RELATIONS` relations, the optimizer finds the cheapest bushy tree over connected
subsets (no cross products) by DP over subsets (DPsub), and keeps it when it is cheaper
than the written order.

Cost of a tree (in units of one relational output row):

* relational join: its output rows (C_out);
* semantic join: ``MODEL_CALL_ROWS`` per model call, ``left * right`` calls, or
  ``left + right`` when factorized;
* output rows = left rows x right rows x the predicates' selectivities.

Cardinalities come from the caller, through the cost model's cardinality API
(`semray.cost_model.cardinality`): ``plan_rows``, the cost model's ``rows_out`` of the written
plan, when there is one, else ``default_rows`` (the default). Each predicate's selectivity is
the written join's output rows divided by the product of its inputs' rows, so measured
semantic-join selectivities are used as measured.

Precondition (otherwise the region is left as written): the relations' column names are
pairwise distinct, so no column is renamed with ``_right`` and every predicate can be
re-qualified (``l.``/``r.``, ``{l.x}``/``{r.x}``) for any placement. A split applies either
the relational predicates that span it (ANDed; at least one equality) or exactly one
semantic predicate. The rendered prompt of a semantic join does not change with its sides. A
factorized join whose sides swap flips an ordered relation (``<``/``>``); one whose right side
is its label set (``right_labels``) keeps its written side order.

What changes: the output columns come back in the written order (a ``Project`` on top when
needed), rows are the same multiset, but ``_rowid`` of a joined row concatenates its parts'
ids in the new join order.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations

import sqlglot
from sqlglot import exp

from semray.cost_model.cardinality import default_rows
from semray.errors import PlanError
from semray.operators.base import Node
from semray.operators.expressions import DIALECT
from semray.operators.relational import Join, NamedExpr, Project
from semray.operators.schema import ROW_ID
from semray.operators.semantic import SemJoin
from semray.planner.capabilities import column_expression, rebuild
from semray.planner.join_factors import FLIPPED

MAX_RELATIONS = 10
MODEL_CALL_ROWS = 1000.0
"""One model call costs as much as producing this many relational rows."""

Cardinality = Callable[[Node], float]


@dataclass(frozen=True, slots=True)
class Predicate:
    """One join condition (relational) or semantic join, and the relations it reads."""

    relations: frozenset[int]
    selectivity: float
    join: Join | SemJoin


@dataclass(frozen=True, slots=True)
class Plan:
    node: Node
    rows: float
    cost: float


def order_joins(plan: Node, cardinality: Cardinality = default_rows) -> Node:
    """``plan`` with every inner-join region of 3+ relations in its cheapest estimated order."""
    if not _is_region_join(plan):
        return plan.with_children(tuple(order_joins(child, cardinality) for child in plan.children))
    relations: list[Node] = []
    joins: list[Join | SemJoin] = []
    _collect(plan, relations, joins)
    ordered_relations = [order_joins(relation, cardinality) for relation in relations]
    if not 3 <= len(relations) <= MAX_RELATIONS or not _distinct_columns(relations):
        return _rebuild_written(plan, dict(zip(map(id, relations), ordered_relations, strict=True)))
    rows = [max(cardinality(relation), 1.0) for relation in relations]
    owner = {name: i for i, relation in enumerate(relations) for name in _user_names(relation)}
    predicates = [_predicate(join, owner, cardinality) for join in joins]
    best = _dp(ordered_relations, rows, predicates, owner)
    written = _written_cost(plan, relations, rows, predicates, owner)
    if best is None or best.cost >= written:
        return _rebuild_written(plan, dict(zip(map(id, relations), ordered_relations, strict=True)))
    return _restore_columns(best.node, plan)


def _is_region_join(node: Node) -> bool:
    return isinstance(node, SemJoin) or (isinstance(node, Join) and node.kind == "inner")


def _collect(node: Node, relations: list[Node], joins: list[Join | SemJoin]) -> None:
    if _is_region_join(node):
        assert isinstance(node, Join | SemJoin)
        _collect(node.left, relations, joins)
        _collect(node.right, relations, joins)
        joins.append(node)
    else:
        relations.append(node)


def _rebuild_written(node: Node, replaced: dict[int, Node]) -> Node:
    if id(node) in replaced:
        return replaced[id(node)]
    return node.with_children(tuple(_rebuild_written(child, replaced) for child in node.children))


def _user_names(node: Node) -> list[str]:
    return [column.name for column in node.output_schema.user_columns()]


def _distinct_columns(relations: list[Node]) -> bool:
    names = [name for relation in relations for name in _user_names(relation)]
    return len(names) == len(set(names))


def _predicate(join: Join | SemJoin, owner: dict[str, int], cardinality: Cardinality) -> Predicate:
    read = {owner[name] for name in join.columns_read() if name in owner}
    denominator = max(cardinality(join.left), 1.0) * max(cardinality(join.right), 1.0)
    selectivity = min(max(cardinality(join) / denominator, 0.0), 1.0)
    return Predicate(relations=frozenset(read), selectivity=selectivity, join=join)


def _dp(relations: list[Node], rows: list[float], predicates: list[Predicate], owner: dict[str, int]) -> Plan | None:
    count = len(relations)
    best: dict[frozenset[int], Plan] = {
        frozenset({i}): Plan(node=relation, rows=rows[i], cost=0.0) for i, relation in enumerate(relations)
    }
    for size in range(2, count + 1):
        for members in combinations(range(count), size):
            subset = frozenset(members)
            for left_size in range(1, size):
                for left_members in combinations(members, left_size):
                    left = frozenset(left_members)
                    candidate = _join(best.get(left), best.get(subset - left), left, subset, predicates, owner)
                    if candidate is not None and (subset not in best or candidate.cost < best[subset].cost):
                        best[subset] = candidate
    return best.get(frozenset(range(count)))


def _join(
    left: Plan | None,
    right: Plan | None,
    left_set: frozenset[int],
    subset: frozenset[int],
    predicates: list[Predicate],
    owner: dict[str, int],
) -> Plan | None:
    if left is None or right is None or right.rows > left.rows:
        return None  # the smaller input goes right (the broadcast side); the mirror split covers it
    spanning = [p for p in predicates if p.relations <= subset and p.relations & left_set and p.relations - left_set]
    relational = [p for p in spanning if isinstance(p.join, Join)]
    semantic = [p for p in spanning if isinstance(p.join, SemJoin)]
    if not spanning or (semantic and (relational or len(semantic) > 1)):
        return None
    selectivity = 1.0
    for predicate in spanning:
        selectivity *= predicate.selectivity
    rows = left.rows * right.rows * selectivity
    node = _build(left.node, right.node, left_set, spanning, owner)
    if node is None:
        return None
    if semantic:
        factorized = getattr(semantic[0].join, "implementation", "") == "factorized"
        step = MODEL_CALL_ROWS * ((left.rows + right.rows) if factorized else left.rows * right.rows)
    else:
        step = rows
    return Plan(node=node, rows=rows, cost=left.cost + right.cost + step)


def _build(
    left: Node, right: Node, left_set: frozenset[int], spanning: list[Predicate], owner: dict[str, int]
) -> Node | None:
    def side(name: str) -> str:
        return "l" if owner[name] in left_set else "r"

    try:
        first = spanning[0].join
        if isinstance(first, SemJoin):
            return _placed_semantic_join(first, left, right, side)
        on = " AND ".join(f"({_resided_sql(p.join.on, side)})" for p in spanning if isinstance(p.join, Join))
        return Join(left=left, right=right, kind="inner", on=on if len(spanning) > 1 else on[1:-1])
    except PlanError:
        return None


def _placed_semantic_join(join: SemJoin, left: Node, right: Node, side: Callable[[str], str]) -> Node | None:
    """``join`` over ``left`` and ``right``; a factorization follows a swap of its sides.

    An ordered relation flips (``{l.a} > {r.b}`` becomes ``{r.a} > {l.b}``, so ``<``); a join
    whose right side is its label set (``right_labels``) keeps its written sides (None here).
    """
    instruction = _resided_template(join.instruction, side)
    written_left = [reference.partition(".")[2] for reference in _fields(join.instruction) if reference[0] == "l"]
    swapped = any(side(column) == "r" for column in written_left)
    if not swapped or join.implementation != "factorized":
        return rebuild(join, left=left, right=right, instruction=instruction)
    if join.right_labels:
        return None
    return rebuild(join, left=left, right=right, instruction=instruction, relation=FLIPPED[join.relation])


def _fields(template: str) -> list[str]:
    return [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]


def _resided_sql(condition: str, side: Callable[[str], str]) -> str:
    def requalify(part: exp.Expression) -> exp.Expression:
        if isinstance(part, exp.Column):
            return exp.column(part.name, table=side(part.name))
        return part

    return sqlglot.parse_one(condition, read=DIALECT).transform(requalify).sql(dialect=DIALECT)


def _resided_template(template: str, side: Callable[[str], str]) -> str:
    pieces: list[str] = []
    for literal, field, _, _ in string.Formatter().parse(template):
        pieces.append(literal.replace("{", "{{").replace("}", "}}"))
        if field is not None:
            column = field.partition(".")[2]
            pieces.append("{" + side(column) + "." + column + "}")
    return "".join(pieces)


def _written_cost(
    node: Node, relations: list[Node], rows: list[float], predicates: list[Predicate], owner: dict[str, int]
) -> float:
    """The same cost model applied to the written tree (so DP only wins when truly cheaper)."""

    def visit(current: Node) -> tuple[frozenset[int], float, float]:
        if not _is_region_join(current):
            index = next(i for i, relation in enumerate(relations) if relation is current)
            return frozenset({index}), rows[index], 0.0
        left_set, left_rows, left_cost = visit(current.children[0])
        right_set, right_rows, right_cost = visit(current.children[1])
        predicate = next(p for p in predicates if p.join is current)
        out = left_rows * right_rows * predicate.selectivity
        if isinstance(current, SemJoin):
            pairs = (left_rows + right_rows) if current.implementation == "factorized" else left_rows * right_rows
            step = MODEL_CALL_ROWS * pairs
        else:
            step = out
        return left_set | right_set, out, left_cost + right_cost + step

    return visit(node)[2]


def _restore_columns(node: Node, written: Node) -> Node:
    names = [name for name in written.output_schema.names if name != ROW_ID]
    if [name for name in node.output_schema.names if name != ROW_ID] == names:
        return node
    return Project(input=node, exprs=tuple(NamedExpr(name=name, expr=column_expression(name)) for name in names))
