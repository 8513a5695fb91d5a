"""What EXPLAIN knows of a query besides its plan: the row counts its sources state, a finished
run's actual figures per operator, and the model tiers it would call."""

from __future__ import annotations

import dataclasses
from typing import Any

from semray.cost_model.estimates import Interval
from semray.cost_model.statistics import PlanStatistics, source_key
from semray.operators import Node, Scan, walk
from semray.operators.semantic import Semantic
from semray.settings import Settings


def source_statistics(plan: Node) -> PlanStatistics:
    """Row counts the sources state cheaply (metadata, not a read): the rest of an estimate uses
    the cost model's documented defaults until statistics are measured."""
    from semray.pipeline.sizing import estimate_rows

    rows = {}
    for node in walk(plan):
        if isinstance(node, Scan) and (count := estimate_rows(node)) is not None:
            rows[source_key(node)] = Interval.exact(float(count))
    return PlanStatistics(source_rows=rows)


def run_actuals(plan: Node, settings: Settings, result: Any) -> dict[str, Any]:
    """What each semantic operator of a finished run paid (a cascade's tiers summed) and, for a
    row-wise one, the rows it passed on, by operator path; the root gets the rows returned."""
    from semray.pipeline.lower_semantic import operator_key
    from semray.planner.explain_estimates import Actual, actuals_by_path
    from semray.transactions import show_run

    paid: dict[str, Any] = {}
    passed: dict[str, int] = {}
    for operator in show_run(settings, result.run_id).operators:
        key = operator.operator_key.partition(":")[0]  # "<key>:small", "<key>:calibration" of a cascade
        paid[key] = paid[key] + operator.usage if key in paid else operator.usage
        if key == operator.operator_key:
            passed[key] = operator.rows_out
    # A row-wise operator's journal holds one answer per input row and counts what it passed on;
    # a cascade's or a set-level operator's does not say its output rows.
    row_wise = {
        operator_key(node)
        for node in walk(plan)
        if isinstance(node, Semantic) and node.row_wise and node.cascade_target() is None
    }
    rows = {key: count for key, count in passed.items() if key in row_wise}
    found = actuals_by_path(plan, paid, operator_key, rows)
    table = getattr(result, "table", None)
    if table is not None:
        found[""] = dataclasses.replace(found.get("", Actual()), rows=table.num_rows)
    return found


def tier_lines(plan: Node, serving: Any) -> str:
    """The model tiers a plan calls, each flagged when simulated; empty for a relational plan."""
    if not any(node.calls_llm for node in walk(plan)):
        return ""
    from semray.serving.config import ServingConfig

    config = serving or ServingConfig()
    lines = ["", "", "Model tiers"]
    for name in ("embedding", "small", "large"):
        tier = config.tier(name)
        note = "  SIMULATED: answers come from labels, not a model" if tier.backend == "simulated" else ""
        lines.append(f"  {name}: {tier.backend} {tier.model}{note}")
    return "\n".join(lines)
