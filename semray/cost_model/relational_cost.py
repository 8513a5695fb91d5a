"""Cost estimators of the relational operators: rows only (no model, no dollars).

An operator's output rows are its row rule's (`semray.cost_model.cardinality`: measured
``source_rows`` and selectivities first, the documented defaults otherwise); its input rows
are its inputs' rows summed (a join's two sides, a union's inputs), a scan's its own.
"""

from __future__ import annotations

from semray.cost_model.cardinality import estimated_rows
from semray.cost_model.estimates import Interval, OperatorEstimate
from semray.cost_model.plan_cost import EstimationContext, register, relational_estimate
from semray.operators.base import Node
from semray.operators.relational import Aggregate, Distinct, Filter, Join, Limit, Project, Scan, Sort, Union


@register(Scan, Filter, Project, Sort, Limit, Union, Join, Aggregate, Distinct)
def relational_cost(
    node: Node, path: str, inputs: tuple[Interval, ...], context: EstimationContext
) -> OperatorEstimate:
    rows_out = estimated_rows(node, inputs, context)
    rows_in = sum(inputs[1:], inputs[0]) if inputs else rows_out
    return relational_estimate(node, path, rows_in, rows_out)
