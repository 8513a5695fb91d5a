"""Row counts for join ordering: from the cost model's estimate of the written plan when there
is one, otherwise textbook defaults.

The defaults (no statistics): a scan has `DEFAULT_SOURCE_ROWS` rows; a filter, relational or
semantic, keeps a third; an inner equi-join yields as many rows as its larger input (a key /
foreign-key join); a semantic join keeps a tenth of the pairs; an aggregate a tenth of its
input; a limit at most its count. They only need to rank orders, not predict runs.
"""

from __future__ import annotations

from collections.abc import Callable

from semray.operators.base import Node
from semray.operators.relational import Aggregate, Join, Limit, Scan, Union
from semray.operators.semantic import SemAgg, SemJoin, SemSearch, SemTopK
from semray.planner.costing import PlanEstimateLike
from semray.planner.paths import operator_paths

DEFAULT_SOURCE_ROWS = 1000.0
FILTER_SELECTIVITY = 1 / 3
SEMANTIC_JOIN_SELECTIVITY = 0.1


def default_cardinality(node: Node) -> float:
    """Estimated output rows of ``node`` by the defaults above."""
    inputs = [default_cardinality(child) for child in node.children]
    if isinstance(node, Scan):
        return DEFAULT_SOURCE_ROWS
    if isinstance(node, Join):
        if node.kind in ("semi", "anti"):
            return inputs[0] * 0.5
        return max(inputs)
    if isinstance(node, SemJoin):
        return inputs[0] * inputs[1] * SEMANTIC_JOIN_SELECTIVITY
    if isinstance(node, Union):
        return sum(inputs)
    if isinstance(node, Limit):
        return min(float(node.count), inputs[0])
    if isinstance(node, SemTopK | SemSearch):
        return min(float(node.k), inputs[0])
    if isinstance(node, Aggregate | SemAgg):
        return max(inputs[0] * 0.1, 1.0) if node.keys else 1.0
    if node.drops_rows_only():  # a Filter, a SemFilter without diagnostics (semi/anti joins are above)
        return inputs[0] * FILTER_SELECTIVITY
    return inputs[0]


def estimated_cardinality(plan: Node, estimate: PlanEstimateLike) -> Callable[[Node], float]:
    """Rows of each operator of ``plan`` (looked up by identity) from the cost model's estimate;
    the defaults for any operator the estimate does not cover."""
    rows_by_path = {operator.path: operator.rows_out.value for operator in estimate.operators}
    rows_by_node = {id(node): rows_by_path[path] for path, node in operator_paths(plan).items() if path in rows_by_path}

    def cardinality(node: Node) -> float:
        known = rows_by_node.get(id(node))
        return known if known is not None else default_cardinality(node)

    return cardinality
