"""semray's metrics on the Ray dashboard, through ``ray.util.metrics``.

Every metric is tagged by run; per-operator ones also by ``operator`` (the plan operator's
name, as the Ray Data operator is named: ``SemFilter[review is positive]``) and ``tier``.
Ray exports each under ``ray_<name>`` on every node's metrics endpoint (counters as
``ray_<name>_total``), where Prometheus scrapes it; ``deploy/grafana/semray.json`` charts
them and ``docs/cluster.md`` says where to look.

Who records what:

* the driver, from each batch its attempt committed to the run's journal
  (``semray.pipeline.workers.metering.CommitMeter``, fed by ``semray.pipeline.runs.progress``): rows in and
  out, model calls, tokens, dollars, failed rows (``DRIVER_COUNTERS``). The driver outlives the
  actor pools, so these reach the metrics agent even for a run of a few seconds;
* the driver, every poll of the journal: rows done and expected, dollars spent and estimated,
  the budget (the gauges);
* the semantic actors, once per batch (``semray.pipeline.workers.metering.OperatorMeter``), only what
  the journal does not know: model requests (cache hits included), cache hits, model errors, a
  cascade's rows by deciding tier, the batch's model round trip (``ACTOR_COUNTERS``, the
  histogram). A worker exports every ~10 s and Ray Data ends an actor pool with its dataset,
  so a pool that ends within that interval loses its last points.

>>> tags = MetricTags(run="20260101-000000-ab12", operator="SemFilter[review is positive]", tier="large")
>>> record_committed(tags, CommittedPoint(rows_in=32, rows_out=12, calls=32))  # doctest: +SKIP
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from ray.util.metrics import Counter, Gauge, Histogram

OPERATOR_TAGS = ("run", "operator", "tier")
RUN_TAGS = ("run",)
BATCH_SECONDS_BOUNDARIES = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

DRIVER_COUNTERS: dict[str, str] = {
    "semray_rows_in": "rows of a semantic operator's committed batches (answered and failed)",
    "semray_rows_out": "rows a semantic operator's committed batches passed on (a filter: the kept ones)",
    "semray_model_calls": "model calls paid (a repair re-ask counts twice, a cache hit zero)",
    "semray_tokens_in": "prompt tokens paid",
    "semray_tokens_out": "completion tokens paid",
    "semray_dollars": "dollars paid for model calls",
    "semray_failed_rows": "rows that got no answer (a model error, an off-format reply, ...)",
}
"""Counted by the driver from the journal's committed (and fenced-off) batches."""
ACTOR_COUNTERS: dict[str, str] = {
    "semray_model_requests": "rows (questions) sent to a model tier, cache hits included",
    "semray_cache_hits": "requests answered by the durable response cache",
    "semray_model_errors": "requests the tier answered with an error code",
    "semray_cascade_rows": "rows of a cascade by the tier that decided them (tier tag)",
}
"""Counted by the semantic actors: what the journal does not record."""
COUNTERS: dict[str, str] = {**DRIVER_COUNTERS, **ACTOR_COUNTERS}
GAUGES: dict[str, str] = {
    "semray_run_rows_done": "rows the run's semantic operators committed (all attempts)",
    "semray_run_rows_expected": "rows the cost model expects the run's semantic operators to take",
    "semray_run_progress": "rows done / rows expected, 0..1 (capped)",
    "semray_run_dollars": "dollars the run's committed batches paid (all attempts)",
    "semray_run_dollars_estimated": "dollars the cost model estimated for the plan before it ran",
    "semray_run_budget_dollars": "the run's budget (Settings.max_cost, --max-cost); 0 without one",
}
HISTOGRAMS: dict[str, str] = {
    "semray_batch_model_seconds": "seconds of one batch's model round trip",
}


@dataclass(frozen=True, slots=True)
class MetricTags:
    """Where a point belongs: run id, the plan operator's name, the tier it ran on."""

    run: str
    operator: str
    tier: str

    def as_dict(self) -> dict[str, str]:
        return {"run": self.run, "operator": self.operator, "tier": self.tier}


@dataclass(frozen=True, slots=True)
class ModelUsagePoint:
    """What one batch's model round trip asked (an actor's view; what it paid is journaled)."""

    requests: int = 0
    cache_hits: int = 0
    errors: int = 0
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class CommittedPoint:
    """What one committed batch holds and paid, as its journal record says."""

    rows_in: int = 0
    rows_out: int = 0
    failed_rows: int = 0
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    dollars: float = 0.0


class _Metrics:
    """The metric objects of this process (one set per worker; Ray aggregates by tags)."""

    def __init__(self) -> None:
        self.counters = {name: Counter(name, text, tag_keys=OPERATOR_TAGS) for name, text in COUNTERS.items()}
        self.gauges = {name: Gauge(name, text, tag_keys=RUN_TAGS) for name, text in GAUGES.items()}
        self.histograms = {
            name: Histogram(name, text, boundaries=list(BATCH_SECONDS_BOUNDARIES), tag_keys=OPERATOR_TAGS)
            for name, text in HISTOGRAMS.items()
        }

    def add(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        if value > 0:  # Ray's counters refuse zero increments
            self.counters[name].inc(value, tags=dict(tags))


@functools.cache
def _metrics() -> _Metrics:
    return _Metrics()


def record_committed(tags: MetricTags, point: CommittedPoint) -> None:
    """A batch of the driver's attempt committed (the driver, as it reads the journal)."""
    metrics, where = _metrics(), tags.as_dict()
    metrics.add("semray_rows_in", point.rows_in, where)
    metrics.add("semray_rows_out", point.rows_out, where)
    metrics.add("semray_failed_rows", point.failed_rows, where)
    metrics.add("semray_model_calls", point.calls, where)
    metrics.add("semray_tokens_in", point.tokens_in, where)
    metrics.add("semray_tokens_out", point.tokens_out, where)
    metrics.add("semray_dollars", point.dollars, where)


def record_model_usage(tags: MetricTags, usage: ModelUsagePoint) -> None:
    """A batch's model round trip (an actor): what it asked, the cache's share, how long it took."""
    metrics, point = _metrics(), tags.as_dict()
    metrics.add("semray_model_requests", usage.requests, point)
    metrics.add("semray_cache_hits", usage.cache_hits, point)
    metrics.add("semray_model_errors", usage.errors, point)
    if usage.requests:
        metrics.histograms["semray_batch_model_seconds"].observe(usage.seconds, tags=point)


def record_cascade_rows(tags: MetricTags, decided: Mapping[str, int]) -> None:
    """Rows of a cascade batch by the tier that decided them (``tags.tier`` is replaced by each)."""
    metrics = _metrics()
    for tier, rows in decided.items():
        metrics.add("semray_cascade_rows", rows, {**tags.as_dict(), "tier": tier})


@dataclass(frozen=True, slots=True)
class RunPoint:
    """A run's progress and cost as the driver last read them from the journal."""

    rows_done: int
    rows_expected: int | None
    dollars: float
    dollars_estimated: float | None
    budget: float | None


def record_run(run: str, point: RunPoint) -> None:
    """Set the run's gauges (the driver, at every poll of the journal)."""
    gauges, tags = _metrics().gauges, {"run": run}
    gauges["semray_run_rows_done"].set(point.rows_done, tags=tags)
    gauges["semray_run_dollars"].set(point.dollars, tags=tags)
    gauges["semray_run_budget_dollars"].set(point.budget or 0.0, tags=tags)
    if point.rows_expected:
        gauges["semray_run_rows_expected"].set(point.rows_expected, tags=tags)
        gauges["semray_run_progress"].set(min(1.0, point.rows_done / point.rows_expected), tags=tags)
    if point.dollars_estimated is not None:
        gauges["semray_run_dollars_estimated"].set(point.dollars_estimated, tags=tags)


def exported_name(name: str) -> str:
    """The Prometheus name Ray exports a metric under, e.g. ``ray_semray_dollars_total``."""
    return f"ray_{name}_total" if name in COUNTERS else f"ray_{name}"
