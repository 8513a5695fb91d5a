"""Batch sizing in lowering: rows per semantic round trip, one task or a shuffle, and whether a
LIMIT's lowered input can run in round trips (``runs_in_rounds``: what ``relational.lower_limit``
asks; the rounds' first size and the chain they run are ``cost_model/limit_chain.py``, shared with
the cost model; ``pipeline/ray/limit_rounds.py`` runs them).

The row counts come from the cost model's one cardinality API
(`semray.cost_model.cardinality`): `row_bound` (what the sources state) and its defaults.
"""

from __future__ import annotations

import math

from semray.cost_model.cardinality import row_bound
from semray.operators.base import Node
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.semantic import SemanticStage, in_rounds
from semray.settings import Settings

BATCHES_PER_ACTOR = 4
"""A semantic operator's batches grow only while each actor still gets about this many: two in
flight (``max_tasks_in_flight_per_actor``) and two queued behind them. Each batch pays a fixed
cost (a Ray task, a journal commit with its fsync, a metrics point); at 16 a batch, 1,000 rows on
2 actors went in 32-row batches and that cost was a third of the run on a zero-latency tier
(benchmarks/RESULTS.md, ``cluster_overhead``)."""


def semantic_batch_rows(node_input: Node, settings: Settings) -> int:
    """Rows per model round trip for a semantic operator over ``node_input``.

    ``semantic_batch_size`` on small or unknown inputs; over a larger input, bigger batches
    (up to ``semantic_batch_max``) while every actor still gets `BATCHES_PER_ACTOR` of them:
    fewer round trips, fewer Ray tasks and ledger commits per row, at the cost of coarser
    progress and budget stops (a run stops between batches). A LIMIT above the operator
    lowers its input with ``semantic_batch_max`` equal to ``semantic_batch_size`` (so a
    ``sem_filter ... LIMIT k`` stops after a few small batches). Examples:
    tests/pipeline/test_semantic_batches.py.
    """
    rows = row_bound(node_input)
    smallest, largest = settings.semantic_batch_size, settings.semantic_batch_max
    if rows is None or largest <= smallest:
        return smallest
    return max(smallest, min(largest, rows // (settings.semantic_actors * BATCHES_PER_ACTOR)))


def semantic_pool_size(node_input: Node, settings: Settings, batch_rows: int) -> int:
    """Actors for a semantic operator over ``node_input`` in batches of ``batch_rows``:
    ``semantic_actors``, or one per batch when the input states fewer batches than that.

    The pool starts at this size (no actor joins mid-run after its start-up), so an actor that
    would get no batch is not started. Example: 40 rows in 32-row batches -> 1 actor.
    """
    rows = row_bound(node_input)
    if rows is None:
        return settings.semantic_actors
    return max(1, min(settings.semantic_actors, math.ceil(rows / max(batch_rows, 1))))


def fits_one_task(node: Node, limit: int) -> bool:
    """Whether ``node``'s sources state at most ``limit`` rows under it (`row_bound`)."""
    count = row_bound(node)
    return count is not None and count <= limit


LIMIT_GROWTH = 2
"""Under a LIMIT, each round trip of a semantic chain covers this many times the rows of the last."""


def runs_in_rounds(stage: Stage) -> bool:
    """Whether ``stage`` (a LIMIT's input, lowered) starts with a chain of stages the rounds can
    run (``stages.semantic.in_rounds``) that asks a model: what ``GrowingLimitStage`` runs on the driver."""
    semantic = False
    while in_rounds(stage):
        semantic = semantic or isinstance(stage, SemanticStage)
        stage = stage.inputs[0]
    return semantic
