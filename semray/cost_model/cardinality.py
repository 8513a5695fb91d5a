"""Row counts of plan operators: one rule per operator type, read three ways, one set of defaults.

Every operator type has one `RowRule` in `ROW_RULES`: how its inputs' row counts become its
own. The engine reads a rule three ways:

* `row_bound(node)`: rows from what the sources state in their metadata (no read), or None
  when a source cannot tell. Lowering chooses by it between one task and a shuffle
  (``Settings.gather_rows``), sizes semantic batches and picks a semantic join's
  implementation; EXPLAIN shows the sources' counts from it. It is an upper bound where an
  operator can only drop rows: filters, maps and aggregates keep their input's count, a LIMIT
  caps it, a union sums; a join counts its larger side (a key / foreign-key join), a semantic
  join its left side.
* `estimated_rows(node, inputs, context)`: an `Interval` from the measured ``PlanStatistics``,
  with the default below where nothing was measured (noted in ``OperatorEstimate.assumed``):
  every cost estimator's ``rows_out``. `plan_rows(plan, estimate)` reads those back per
  operator for join ordering with a cost model.
* `default_rows(node)`: `estimated_rows` with no statistics at all, its point value: join
  ordering without a cost model, and wherever the cost model's estimate does not cover an
  operator. It is the same reading with nothing measured, so it takes the same defaults.

The defaults, one figure per quantity, all in this module; lowering takes the same ones where
it needs a selectivity before anything is measured (``pipeline/lowering/sizing.py``):

==================================  ===========================================  ========================
quantity                            default when unmeasured                      constant
==================================  ===========================================  ========================
a source's rows                     10,000 in [0, inf)                           `UNMEASURED_SOURCE_ROWS`
a relational filter's kept share    1/3 in [0, 1] (System R)                     `DEFAULT_FILTER_SELECTIVITY`
a semantic filter's kept share      0.5 in [0, 1]                                `UNMEASURED_SELECTIVITY`
a semi or anti join's kept share    0.5 of ``|L|`` in [0, 1]                     `SEMI_JOIN_SELECTIVITY`
a semantic join's kept pairs        0.1 of the pairs it judges in [0, 1]         `SEMANTIC_JOIN_SELECTIVITY`
                                    (`join_pairs`: ``|L| x |R|``, blocked
                                    ``|L| x min(|R|, block_size)``)
an inner or left join               ``max(|L|, |R|)`` in [0, |L| x |R|]
                                    (key / foreign key); a left join >= ``|L|``
an aggregate with keys (relational  ``sqrt(rows)`` groups in [1, rows]
or semantic); without keys          1
distinct                            every row, in [1, rows]
top-k, search                       ``min(k, rows)``
limit                               ``min(count, rows - offset)``
==================================  ===========================================  ========================

Every other operator (project, sort, map, classify, extract, code, a semantic filter with
diagnostics) keeps every row. Measured selectivities (``PlanStatistics.selectivity`` under the
node's `statistics_key`: a filter's kept fraction, a join's fraction of the pairs it judges, an
aggregate's groups per input row) replace the defaults.

>>> from semray.operators import Filter, Limit, Scan, Schema, SourceSpec
>>> scan = Scan(source=SourceSpec(kind="memory", options={"name": "t"}), source_schema=Schema.of(("x", "BIGINT")))
>>> default_rows(Limit(input=Filter(input=scan, predicate="x > 1"), count=100))
100.0
>>> round(default_rows(Filter(input=scan, predicate="x > 1")), 1)
3333.3
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from semray.cost_model.estimates import EstimateError, Interval, PlanEstimate
from semray.cost_model.plan_cost import EstimationContext
from semray.cost_model.statistics import PlanStatistics
from semray.operators.base import Node, walk
from semray.operators.code import SemCode
from semray.operators.join_sides import block_size, join_implementation
from semray.operators.keys import source_key, statistics_key
from semray.operators.plan import ROW_SEMANTIC
from semray.operators.plan_paths import operator_paths
from semray.operators.relational import (
    Aggregate,
    Distinct,
    Filter,
    Join,
    Limit,
    Project,
    Scan,
    Sort,
    SourceSpec,
    Union,
)
from semray.operators.semantic import SemAgg, SemJoin, SemSearch, SemTopK
from semray.sources import open_source

UNMEASURED_SOURCE_ROWS = Interval(10_000.0, 0.0, math.inf)
"""A source nobody counted: a guess with no upper bound."""
DEFAULT_FILTER_SELECTIVITY = Interval(1.0 / 3.0, 0.0, 1.0)
"""The share of rows a relational filter nobody measured keeps (System R's default)."""
UNMEASURED_SELECTIVITY = Interval(0.5, 0.0, 1.0)
"""The share of rows a semantic filter nobody measured keeps: anything from none to all rows."""
SEMI_JOIN_SELECTIVITY = Interval(0.5, 0.0, 1.0)
"""The share of its left rows a semi or anti join nobody measured keeps."""
SEMANTIC_JOIN_SELECTIVITY = Interval(0.1, 0.0, 1.0)
"""The share of pairs a semantic join nobody measured keeps: a match is rarer than a kept row."""

Bound = Callable[[Node, tuple[int, ...]], int | None]
Estimate = Callable[[Node, tuple[Interval, ...], EstimationContext], Interval]


@dataclass(frozen=True, slots=True)
class RowRule:
    """One operator type's output rows from its inputs' rows (in ``children`` order):
    ``bound`` from source metadata, ``estimate`` from statistics (or the defaults)."""

    bound: Bound
    estimate: Estimate


def rule_of(node: Node) -> RowRule:
    """The row rule of ``node``'s type."""
    rule = ROW_RULES.get(type(node))
    if rule is None:
        raise EstimateError(
            f"no row-count rule for {type(node).__name__}; add one to ROW_RULES in semray/cost_model/cardinality.py"
        )
    return rule


def row_bound(node: Node) -> int | None:
    """Rows of ``node`` from what its sources state, or None when a source cannot tell."""
    inputs = [row_bound(child) for child in node.children]
    known = tuple(count for count in inputs if count is not None)
    if len(known) < len(inputs):
        return None
    return rule_of(node).bound(node, known)


def source_statistics(plan: Node) -> PlanStatistics:
    """Row counts the sources state cheaply (metadata, not a read), keyed as ``PlanStatistics.source_rows``:
    the rest of an estimate uses the cost model's documented defaults until statistics are measured."""
    rows = {}
    for node in walk(plan):
        if isinstance(node, Scan) and (count := row_bound(node)) is not None:
            rows[source_key(node)] = Interval.exact(float(count))
    return PlanStatistics(source_rows=rows)


def default_rows(node: Node) -> float:
    """Rows of ``node`` with no statistics: `estimated_rows`' point value by the defaults alone."""
    return _unmeasured_rows(node, EstimationContext(PlanStatistics(), {}, {})).value


def _unmeasured_rows(node: Node, context: EstimationContext) -> Interval:
    inputs = tuple(_unmeasured_rows(child, context) for child in node.children)
    return estimated_rows(node, inputs, context)


def estimated_rows(node: Node, inputs: tuple[Interval, ...], context: EstimationContext) -> Interval:
    """Rows of ``node`` given its inputs' estimated rows, from ``context``'s statistics (or the
    defaults, noted as assumed)."""
    return rule_of(node).estimate(node, inputs, context)


def plan_rows(plan: Node, estimate: PlanEstimate) -> Callable[[Node], float]:
    """Rows of each operator of ``plan`` (looked up by identity) from the cost model's estimate
    of it; `default_rows` for any operator the estimate does not cover."""
    rows_by_path = {operator.path: operator.rows_out.value for operator in estimate.operators}
    rows_by_node = {id(node): rows_by_path[path] for path, node in operator_paths(plan).items() if path in rows_by_path}

    def rows(node: Node) -> float:
        known = rows_by_node.get(id(node))
        return known if known is not None else default_rows(node)

    return rows


@functools.lru_cache(maxsize=256)
def _source_rows(spec: SourceSpec) -> int | None:
    return open_source(spec.kind, spec.path, spec.options).estimated_rows()


# Bounds (source metadata).


def _source_bound(node: Node, inputs: tuple[int, ...]) -> int | None:
    assert isinstance(node, Scan)
    return _source_rows(node.source)


def _first_bound(node: Node, inputs: tuple[int, ...]) -> int | None:
    return inputs[0]


def _limit_bound(node: Node, inputs: tuple[int, ...]) -> int | None:
    assert isinstance(node, Limit)
    return min(inputs[0], node.count + node.offset)


def _sum_bound(node: Node, inputs: tuple[int, ...]) -> int | None:
    return sum(inputs)


def _larger_bound(node: Node, inputs: tuple[int, ...]) -> int | None:
    return max(inputs)


# Estimates (statistics, with intervals).


def _source_estimate(node: Node, inputs: tuple[Interval, ...], context: EstimationContext) -> Interval:
    assert isinstance(node, Scan)
    key = source_key(node)
    rows = context.statistics.source_rows.get(key)
    if rows is None:
        context.missing(
            "source_rows",
            f"no row count for source {key!r}; measure it with semray.cost_model.relational.sample_source",
        )
        return UNMEASURED_SOURCE_ROWS
    return rows


def _first_estimate(node: Node, inputs: tuple[Interval, ...], context: EstimationContext) -> Interval:
    return inputs[0]


def _filter_estimate(node: Node, inputs: tuple[Interval, ...], context: EstimationContext) -> Interval:
    return inputs[0] * context.selectivity(node, DEFAULT_FILTER_SELECTIVITY)


def _limit_estimate(node: Node, inputs: tuple[Interval, ...], context: EstimationContext) -> Interval:
    assert isinstance(node, Limit)
    rows = inputs[0]
    after_offset = Interval(
        max(rows.value - node.offset, 0.0), max(rows.low - node.offset, 0.0), max(rows.high - node.offset, 0.0)
    )
    return after_offset.minimum(float(node.count))


def _sum_estimate(node: Node, inputs: tuple[Interval, ...], context: EstimationContext) -> Interval:
    rows = inputs[0]
    for more in inputs[1:]:
        rows = rows + more
    return rows


def _join_estimate(node: Node, inputs: tuple[Interval, ...], context: EstimationContext) -> Interval:
    assert isinstance(node, Join)
    left, right = inputs
    pairs = left * right
    if node.kind in ("semi", "anti"):
        return left * context.selectivity(node, SEMI_JOIN_SELECTIVITY)
    measured = _measured(node, context)
    if measured is not None:
        out = pairs * measured
    else:
        out = Interval(max(left.value, right.value), 0.0, max(pairs.high, left.high, right.high))
    if node.kind == "left":
        out = Interval(max(out.value, left.value), left.low, max(out.high, left.high))
    return out


def _grouping_estimate(node: Node, inputs: tuple[Interval, ...], context: EstimationContext) -> Interval:
    """Groups of an Aggregate, a SemAgg (one call per group) or a Distinct."""
    (rows,) = inputs
    if isinstance(node, Aggregate | SemAgg) and not node.keys:
        return Interval.exact(1.0)
    measured = _measured(node, context)
    if measured is not None:
        groups = rows * measured
        return groups.clip(min(1.0, rows.low), rows.high)
    value = rows.value if isinstance(node, Distinct) else math.sqrt(max(rows.value, 0.0))
    return Interval.spanning(value, min(1.0, rows.low), rows.high)


def _row_wise_estimate(node: Node, inputs: tuple[Interval, ...], context: EstimationContext) -> Interval:
    """A row-wise semantic operator that only drops rows (a filter without diagnostics) keeps its
    selectivity's share, any other every row."""
    (rows,) = inputs
    if node.drops_rows_only():
        return rows * context.selectivity(node, UNMEASURED_SELECTIVITY)
    return rows


def _semantic_join_estimate(node: Node, inputs: tuple[Interval, ...], context: EstimationContext) -> Interval:
    """A share of the pairs the join judges (`join_pairs`): a blocked join can only keep pairs
    among its candidates, so never more than ``|L| x min(|R|, block_size)``."""
    assert isinstance(node, SemJoin)
    left, right = inputs
    return join_pairs(node, left, right) * context.selectivity(node, SEMANTIC_JOIN_SELECTIVITY)


def join_pairs(node: SemJoin, left: Interval, right: Interval) -> Interval:
    """The pairs a semantic join judges, which its selectivity is a share of: ``|L| x |R|``, or
    ``|L| x min(|R|, block_size(|R|))`` when it runs blocked (``operators/join_sides``: the
    candidates lowering keeps per left row). A factorized join compares its sides' answers over
    every pair (its model calls are per row: ``semantic_cost``).

    >>> from semray.operators import Scan, Schema, SourceSpec
    >>> t = Scan(source=SourceSpec(kind="memory", options={"name": "t"}), source_schema=Schema.of(("a", "VARCHAR")))
    >>> join = SemJoin(left=t, right=t, instruction="{l.a} and {r.a} match", implementation="blocked")
    >>> join_pairs(join, Interval.exact(10), Interval.exact(1000)).value  # 127 candidates per left row
    1270.0
    """
    if join_implementation(node, left.value, right.value) != "blocked":
        return left * right
    return left * Interval(*(min(rows, _block(rows)) for rows in (right.value, right.low, right.high)))


def _block(rows: float) -> float:
    return float(block_size(math.ceil(rows))) if math.isfinite(rows) else math.inf  # grows with sqrt(rows)


def _top_estimate(node: Node, inputs: tuple[Interval, ...], context: EstimationContext) -> Interval:
    assert isinstance(node, SemTopK | SemSearch)
    return inputs[0].minimum(float(node.k))


def _search_bound(node: Node, inputs: tuple[int, ...]) -> int | None:
    """Its input's rows; at a segment level, k (several segments of one document may be hits)."""
    assert isinstance(node, SemSearch)
    return node.k if node.level is not None else inputs[0]


def _search_estimate(node: Node, inputs: tuple[Interval, ...], context: EstimationContext) -> Interval:
    """k of its input's rows, or, at a segment level, k segments of any documents (none without any)."""
    assert isinstance(node, SemSearch)
    if node.level is None:
        return _top_estimate(node, inputs, context)
    k = float(node.k)
    return Interval(k if inputs[0].value >= 1.0 else 0.0, 0.0, k if inputs[0].high > 0.0 else 0.0)


def _measured(node: Node, context: EstimationContext) -> Interval | None:
    """``node``'s measured selectivity: a join or an aggregate whose default is no share of its
    input (the larger side, the square root) uses one only when it was measured."""
    return context.statistics.selectivity.get(statistics_key(node))


_KEEPS_ROWS = RowRule(_first_bound, _first_estimate)

ROW_RULES: Mapping[type[Node], RowRule] = {
    Scan: RowRule(_source_bound, _source_estimate),
    Filter: RowRule(_first_bound, _filter_estimate),
    Project: _KEEPS_ROWS,
    Sort: _KEEPS_ROWS,
    Distinct: RowRule(_first_bound, _grouping_estimate),
    Limit: RowRule(_limit_bound, _limit_estimate),
    Union: RowRule(_sum_bound, _sum_estimate),
    Join: RowRule(_larger_bound, _join_estimate),
    Aggregate: RowRule(_first_bound, _grouping_estimate),
    **dict.fromkeys(ROW_SEMANTIC, RowRule(_first_bound, _row_wise_estimate)),
    SemJoin: RowRule(_first_bound, _semantic_join_estimate),
    SemTopK: RowRule(_first_bound, _top_estimate),
    SemSearch: RowRule(_search_bound, _search_estimate),
    SemAgg: RowRule(_first_bound, _grouping_estimate),
    SemCode: _KEEPS_ROWS,
}
"""Operator type -> its row rule; every logical operator has one (tests/test_fitness.py checks it)."""
