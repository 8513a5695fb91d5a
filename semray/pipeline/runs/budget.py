"""A run's budget (``Settings.max_cost``, ``--max-cost``): refuse a plan estimated over it, stop a
run whose projected cost would pass it.

Two checks, both against dollars for model calls:

* **before the run starts** (``check_forecast``): the cost model's estimate of the plan
  (``forecast``: the same estimate EXPLAIN prints, from the sources' stated row counts and
  documented defaults where nothing was measured). On a resume, only what is left counts:
  what the run paid so far plus the estimate times the share of rows not yet done.
* **while it runs** (``budget_stop``, polled by the driver's watcher in
  ``semray.pipeline.runs.progress``): the cost so far plus what the batches in flight will likely
  pay (the mean of the paid batches so far, times the actor pools' batches in flight). Once that
  passes the budget the driver asks the run to stop between batches, as ``semray runs cancel``
  does: committed batches stay, the run ends ``cancelled`` with a message saying so, and
  ``semray runs resume ID --max-cost HIGHER`` finishes it without paying for them again.

>>> print(budget_stop(spent=0.009, paid_batches=9, in_flight=2, budget=0.01, run_id="r1", expected=0.05))
stopped: cost $0.0090 reached the budget $0.0100 (projected $0.0110 with the 2 batches in flight); resume with \
`semray runs resume r1 --max-cost 0.05`
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from semray.cost_model.estimates import EstimateError
from semray.errors import SemrayError
from semray.log import get_logger
from semray.operators.base import Node
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.semantic import SemanticStage
from semray.serving.config import ServingConfig

log = get_logger(__name__)

IN_FLIGHT_PER_ACTOR = 2
"""``max_tasks_in_flight_per_actor`` of the semantic actor pools (``pipeline/ray/semantic.build_semantic``)."""


class BudgetError(SemrayError):
    """A plan's estimated cost is over the run's budget (``--max-cost``, ``Settings.max_cost``)."""


@dataclass(frozen=True, slots=True)
class Forecast:
    """What the cost model expects a plan's model calls to take: rows in and dollars (with interval)."""

    rows: int
    dollars: float
    dollars_low: float
    dollars_high: float


def forecast(plan: Node, serving: ServingConfig | None) -> Forecast | None:
    """The cost model's estimate of ``plan``'s model calls; None when it cannot estimate the plan."""
    from semray.cost_model.cardinality import source_statistics
    from semray.cost_model.plan_cost import estimate_plan
    from semray.cost_model.prices import profiles_from_serving

    try:
        estimate = estimate_plan(plan, source_statistics(plan), profiles_from_serving(serving or ServingConfig()))
    except EstimateError as error:
        log.info("run_not_estimated", reason=str(error))
        return None
    rows = sum(operator.rows_in.value for operator in estimate.operators if operator.tier != "none")
    return Forecast(
        rows=_finite_int(rows),
        dollars=estimate.dollars.value,
        dollars_low=estimate.dollars.low,
        dollars_high=estimate.dollars.high,
    )


def check_forecast(
    expected: Forecast | None, budget: float | None, paid: float = 0.0, done_share: float = 0.0, run_id: str = ""
) -> None:
    """Raise ``BudgetError`` when the run would pass ``budget``: ``paid`` so far plus the forecast's
    dollars for the share of rows not yet done (``done_share``, 0 for a new run).

    >>> check_forecast(Forecast(100, 0.5, 0.2, 0.9), budget=1.0)
    >>> check_forecast(Forecast(100, 0.5, 0.2, 0.9), budget=0.1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    semray.pipeline.runs.budget.BudgetError: the plan's estimated cost $0.5000 (interval $0.2000-$0.9000) ... 0.50 ...
    """
    if budget is None or expected is None:
        return
    remaining = expected.dollars * max(0.0, 1.0 - min(1.0, done_share))
    projected = paid + remaining
    if projected <= budget:
        return
    if paid:
        what = f"run {run_id} paid ${paid:.4f} so far and the rest is estimated at ${remaining:.4f}"
    else:
        interval = f" (interval ${expected.dollars_low:.4f}-{_dollars(expected.dollars_high)})"
        what = f"the plan's estimated cost ${expected.dollars:.4f}{interval}"
    raise BudgetError(
        f"{what} is over the budget ${budget:.4f}; raise it with --max-cost {suggested_budget(projected)} "
        "(Settings.max_cost), or make the plan cheaper (a smaller tier, a LIMIT, --policy mincost:QUALITY)"
    )


def budget_stop(
    spent: float, paid_batches: int, in_flight: int, budget: float, run_id: str, expected: float | None = None
) -> str | None:
    """The stop message when the cost so far plus the batches in flight would pass ``budget``; else None."""
    mean = spent / paid_batches if paid_batches else 0.0
    projected = spent + mean * in_flight
    if projected <= budget and spent < budget:
        return None
    raise_to = suggested_budget(max(2 * budget, expected or 0.0, projected))
    return (
        f"stopped: cost ${spent:.4f} reached the budget ${budget:.4f} (projected ${projected:.4f} with the "
        f"{in_flight} batches in flight); resume with `semray runs resume {run_id} --max-cost {raise_to}`"
    )


def in_flight_batches(stage: Stage) -> int:
    """Batches the plan's actor pools can have in flight at once (each actor takes two)."""
    own = stage.actors * IN_FLIGHT_PER_ACTOR if isinstance(stage, SemanticStage) else 0
    return own + sum(in_flight_batches(child) for child in stage.inputs)


def suggested_budget(dollars: float) -> str:
    """A budget a little above ``dollars``, in cents: ``suggested_budget(0.0412)`` is ``'0.05'``."""
    return f"{max(0.01, math.ceil(round(dollars * 100, 6)) / 100):.2f}"


def _dollars(value: float) -> str:
    return "unbounded" if math.isinf(value) else f"${value:.4f}"


def _finite_int(value: float) -> int:
    return int(value) if math.isfinite(value) else 0
