"""Cardinality estimators of the relational operators (no model, no dollars).

Measured figures win: a Scan's rows come from ``PlanStatistics.source_rows``; a Filter, a
Join, an Aggregate or a Distinct use ``PlanStatistics.selectivity`` under their
`statistics_key` when present (a Filter's kept fraction, a Join's fraction of the cross
product, an Aggregate's or Distinct's groups per input row). Without a measurement:

* Filter: System R's default selectivity 1/3, in [0, 1];
* inner Join: ``max(|L|, |R|)`` (a key / foreign-key join), in ``[0, |L| * |R|]``; left join:
  at least ``|L|``; semi and anti: ``|L| / 2`` in ``[0, |L|]``;
* Aggregate with keys: ``sqrt(rows)`` groups in ``[1, rows]``; without keys: 1 row;
* Distinct: no duplicates, in ``[min(1, rows), rows]``.
"""

from __future__ import annotations

import math

from semray.cost_model.estimates import Interval, OperatorEstimate
from semray.cost_model.plan_cost import UNMEASURED_SOURCE_ROWS, EstimationContext, register, relational_estimate
from semray.cost_model.statistics import source_key, statistics_key
from semray.operators.base import Node
from semray.operators.relational import Aggregate, Distinct, Filter, Join, Limit, Project, Scan, Sort, Union

DEFAULT_FILTER_SELECTIVITY = Interval(1.0 / 3.0, 0.0, 1.0)
HALF = Interval(0.5, 0.0, 1.0)


@register(Scan)
def scan_cost(node: Node, path: str, inputs: tuple[Interval, ...], context: EstimationContext) -> OperatorEstimate:
    assert isinstance(node, Scan)
    key = source_key(node)
    rows = context.statistics.source_rows.get(key)
    if rows is None:
        context.missing(
            "source_rows",
            f"no row count for source {key!r}; measure it with semray.cost_model.relational.sample_source",
        )
        rows = UNMEASURED_SOURCE_ROWS
    return relational_estimate(node, path, rows, rows)


@register(Filter)
def filter_cost(node: Node, path: str, inputs: tuple[Interval, ...], context: EstimationContext) -> OperatorEstimate:
    (rows,) = inputs
    return relational_estimate(node, path, rows, rows * context.selectivity(node, DEFAULT_FILTER_SELECTIVITY))


@register(Project, Sort)
def passthrough_cost(
    node: Node, path: str, inputs: tuple[Interval, ...], context: EstimationContext
) -> OperatorEstimate:
    (rows,) = inputs
    return relational_estimate(node, path, rows, rows)


@register(Limit)
def limit_cost(node: Node, path: str, inputs: tuple[Interval, ...], context: EstimationContext) -> OperatorEstimate:
    assert isinstance(node, Limit)
    (rows,) = inputs
    after_offset = Interval(
        max(rows.value - node.offset, 0.0), max(rows.low - node.offset, 0.0), max(rows.high - node.offset, 0.0)
    )
    return relational_estimate(node, path, rows, after_offset.minimum(float(node.count)))


@register(Union)
def union_cost(node: Node, path: str, inputs: tuple[Interval, ...], context: EstimationContext) -> OperatorEstimate:
    rows = inputs[0]
    for more in inputs[1:]:
        rows = rows + more
    return relational_estimate(node, path, rows, rows)


@register(Join)
def join_cost(node: Node, path: str, inputs: tuple[Interval, ...], context: EstimationContext) -> OperatorEstimate:
    assert isinstance(node, Join)
    left, right = inputs
    pairs = left * right
    if node.kind in ("semi", "anti"):
        return relational_estimate(node, path, left + right, left * context.selectivity(node, HALF))
    if _measured(node, context):
        out = pairs * context.selectivity(node)
    else:
        out = Interval(max(left.value, right.value), 0.0, max(pairs.high, left.high, right.high))
    if node.kind == "left":
        out = Interval(max(out.value, left.value), left.low, max(out.high, left.high))
    return relational_estimate(node, path, left + right, out)


@register(Aggregate, Distinct)
def grouping_cost(node: Node, path: str, inputs: tuple[Interval, ...], context: EstimationContext) -> OperatorEstimate:
    (rows,) = inputs
    if isinstance(node, Aggregate) and not node.keys:
        return relational_estimate(node, path, rows, Interval.exact(1.0))
    if _measured(node, context):
        groups = rows * context.selectivity(node)
        return relational_estimate(node, path, rows, groups.clip(min(1.0, rows.low), rows.high))
    floor = min(1.0, rows.low)
    value = rows.value if isinstance(node, Distinct) else math.sqrt(max(rows.value, 0.0))
    return relational_estimate(node, path, rows, Interval.spanning(value, floor, rows.high))


def _measured(node: Node, context: EstimationContext) -> bool:
    return statistics_key(node) in context.statistics.selectivity
