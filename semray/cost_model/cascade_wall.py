"""Projected wall time of a cascade and of the large tier alone over the same rows.

A cascade (`semray.pipeline.ray.cascade`) runs in this order over ``N`` input rows, with ``L``
calibration labels and ``R`` rows routed to the large tier after them (`cascade_cost.CascadeSplit`):

1. the **proxy pass**: an actor pool starts (``STAGE_START_S``) and the embedding tier embeds every
   row; nothing else can start, because the calibration draw needs every row's proxy;
2. then, at the same time:

   * the **large tier's line**: a task has the large tier label the ``L`` draws, then the routed
     ``R`` rows go to it (they wait for the route; the routing pass's pools start, ``STAGE_START_S``,
     while the labels are bought): ``max(STAGE_START_S, labels) + routed``;
   * the **small tier's line**: the routing pass's pools start and the small tier answers every row
     (the draws inside the calibration task, the others while the route is chosen):
     ``STAGE_START_S + small``.

   So ``cascade = STAGE_START_S + proxies + max(large line, small line)``, and the large tier alone
   is ``STAGE_START_S + N calls on the large tier``.

A tier's calls take ``(calls * latency_per_call + tokens / tokens_per_s) / min(concurrency, calls)``
seconds, as `semray.cost_model.plan_cost.model_estimate` prices them. The embedding tier is different:
a local embedder (sentence_transformers, hf) is one model per replica, busy with whatever batches
it holds, so its throughput is ``tokens_per_s`` per replica, not per call in flight:
``tokens / (tokens_per_s * replicas) + calls * latency_per_call / concurrency``. Its ``tokens_per_s``
is the profile's (`semray.cost_model.prices.DEFAULT_TOKENS_PER_S`: 3,000 a second for MiniLM on CPU,
a documented assumption; 600 symptom texts of 40 tokens took 7-9 s of model time on 2 CPU cores,
2,700-3,400 a second, benchmarks/notes/cascade.md).

``STAGE_START_S`` is what an actor pool of the executor takes before its first batch is sent
(processes, imports, tier handles): 5 s measured on 2 CPU cores (benchmarks/notes/cascade.md, the
proxy pass). Both projections count the same start for their first stage, so the figure cancels in
their difference; the rest of the engine's own time (the run's journal, Ray Data's scheduling) is
common to both and left out, so a projection is below the measured wall time by about that
(7.5 s for 600 rows here, the measured all-large run with instant tiers).

>>> from semray.cost_model.prices import TierProfile
>>> from semray.cost_model.estimates import Interval
>>> large = TierProfile("large", 2.5, 10.0, 0.0, float("inf"), 8, latency_per_call_s=0.48)
>>> round(large.seconds(Interval.exact(600), Interval.exact(0.0)).value, 1)
36.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from semray.cost_model.estimates import ZERO, Interval
from semray.cost_model.prices import TierProfile

STAGE_START_S = 5.0
"""Seconds an actor pool of the executor takes to send its first batch (2 CPU cores, measured)."""


@dataclass(frozen=True, slots=True)
class CascadeWall:
    """A cascade's projected wall time by part, and the large tier's alone over the same rows."""

    proxies: Interval
    """The proxy pass: its pool's start and every row embedded."""
    labels: Interval
    """The large tier labelling the calibration draws."""
    small: Interval
    """The small tier answering its rows (after the routing pass's pools start)."""
    routed: Interval
    """The large tier answering the rows routed to it, after the labels."""
    cascade: Interval
    """The whole cascade: proxies, then the longer of the large tier's and the small tier's lines."""
    large_alone: Interval
    """The large tier alone over every row, its pool's start included."""

    @property
    def slowdown(self) -> float:
        """The cascade's projected wall time over the large tier's alone (point values)."""
        if self.large_alone.value <= 0.0:
            return math.inf if self.cascade.value > 0.0 else 1.0
        return self.cascade.value / self.large_alone.value

    def describe(self) -> str:
        """``projected wall time: cascade 39.4 s (proxies 13.0 + ...) · large tier alone 41.0 s``."""
        return (
            f"projected wall time: cascade {self.cascade.value:.1f} s (proxies {self.proxies.value:.1f}, "
            f"labels {self.labels.value:.1f}, small {self.small.value:.1f}, routed {self.routed.value:.1f}) "
            f"· large tier alone {self.large_alone.value:.1f} s"
        )


def embedding_seconds(profile: TierProfile, calls: Interval, tokens: Interval) -> Interval:
    """Seconds the embedding tier takes for ``calls`` texts of ``tokens`` tokens in all: its model's
    throughput per replica, plus any per-call latency spread over the calls in flight."""
    if calls.high <= 0:
        return ZERO
    speed = 0.0 if math.isinf(profile.tokens_per_s) else 1.0 / (profile.tokens_per_s * profile.replicas)
    waiting = calls.scale(profile.latency_per_call_s / max(1, profile.concurrency))
    return tokens.scale(speed) + waiting


def cascade_wall(
    profiles: Mapping[str, TierProfile],
    *,
    rows: Interval,
    labels: Interval,
    embedding_rows: Interval,
    small_rows: Interval,
    large_rows: Interval,
    prompt: Interval,
    embedded: Interval,
    completion: Interval,
    top_tier: str = "large",
) -> CascadeWall:
    """The projected wall times of a cascade whose tiers answer these rows (``large_rows`` counts the
    calibration ``labels``) and of the top tier alone over ``rows``; ``prompt`` and ``completion``
    tokens per LLM call, ``embedded`` tokens per embedded row."""
    large, small = profiles[top_tier], profiles.get("small")
    per_call = prompt + completion
    embedder = profiles.get("embedding")
    proxies = ZERO if embedder is None else embedding_seconds(embedder, embedding_rows, embedding_rows * embedded)
    labelled = large.seconds(labels, labels * per_call)
    routed_rows = Interval(
        max(large_rows.value - labels.value, 0.0),
        max(large_rows.low - labels.high, 0.0),
        max(large_rows.high - labels.low, 0.0),
    )
    routed = large.seconds(routed_rows, routed_rows * per_call)
    answered = ZERO if small is None else small.seconds(small_rows, small_rows * per_call)
    start = Interval.exact(STAGE_START_S)
    large_line = _larger(start, labelled) + routed
    small_line = start + answered if small_rows.high > 0 else ZERO
    cascade = start + proxies + _larger(large_line, small_line)
    alone = start + large.seconds(rows, rows * per_call)
    return CascadeWall(start + proxies, labelled, answered, routed, cascade, alone)


def _larger(a: Interval, b: Interval) -> Interval:
    return Interval(max(a.value, b.value), max(a.low, b.low), max(a.high, b.high))
