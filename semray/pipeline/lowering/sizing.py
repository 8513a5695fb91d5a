"""Batch sizing in lowering: rows per semantic round trip, one task or a shuffle, and the
round trips of a LIMIT over a chain of row-wise semantic operators (``first_round_rows``,
``runs_in_rounds``: what ``relational.lower_limit`` asks; ``pipeline/ray/limit_rounds.py`` runs them).

The row counts come from the cost model's one cardinality API
(`semray.cost_model.cardinality`): `row_bound` (what the sources state) and its defaults.
"""

from __future__ import annotations

import math

from semray.cost_model.cardinality import (
    DEFAULT_FILTER_SELECTIVITY,
    SEMANTIC_JOIN_SELECTIVITY,
    UNMEASURED_SELECTIVITY,
    row_bound,
)
from semray.operators.base import Node
from semray.operators.join_sides import is_self_join
from semray.operators.relational import Filter, Limit, Project
from semray.operators.semantic import Semantic, SemJoin, is_row_semantic
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.semantic import SemanticStage, in_rounds
from semray.settings import Settings
from semray.tasks import TaskKind

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


def limit_first_rows(limit: Limit) -> int | None:
    """Input rows the first round trip of a ``LIMIT`` over a chain of row-wise semantic operators
    covers: about ``(count + offset) / selectivity`` of the chain; None when ``limit.input`` is no
    such chain (it lowers to a plain ``LimitStage``).

    The chain is what lies directly under the LIMIT: row-wise semantic operators, relational
    filters and projections between them, at least one semantic operator. Lowering sees no measured
    statistics, so each semantic filter counts at the cost model's ``UNMEASURED_SELECTIVITY`` (0.5)
    and each relational filter at its ``DEFAULT_FILTER_SELECTIVITY`` (1/3), both from
    `semray.cost_model.cardinality`; maps, classifications
    and extractions keep every row. Example: ``sem_filter(a).sem_filter(b).limit(5)`` asks
    5 / (0.5 x 0.5) = 20 rows first. A factorized join is part of the chain, its left side below it
    (`_left_row_yield`). A cascaded operator joins the chain only when the LIMIT needs no more rows
    than its calibration would label (`limit_chain`): it then runs on the large tier.
    """
    selectivity, semantic, labels = 1.0, 0, math.inf
    for node in _chain(limit.input):
        if isinstance(node, SemJoin):  # factorized: its left rows are the rounds' rows
            semantic += 1
            selectivity *= _left_row_yield(node, (limit.count + limit.offset) / selectivity)
        elif isinstance(node, Semantic):
            semantic += 1
            target = node.cascades()
            if target is not None:
                labels = min(labels, target.labels)
            if node.task_kind() == TaskKind.FILTER:
                selectivity *= UNMEASURED_SELECTIVITY.value
        elif isinstance(node, Filter):
            selectivity *= DEFAULT_FILTER_SELECTIVITY.value
    rows = math.ceil((limit.count + limit.offset) / selectivity)
    if not semantic or rows > labels:
        return None
    return max(1, rows)


def limit_chain(limit: Limit) -> Node:
    """``limit.input`` with every cascaded operator of the chain under the LIMIT on the large tier.

    Under a LIMIT that needs no more rows than a cascade's calibration sample (`limit_first_rows`),
    the cascade would pay for proxies over its whole input, ``labels`` large-tier labels and the
    small tier before the LIMIT could stop anything; asking the large tier row by row costs fewer
    large-tier calls than the calibration alone, and meets any quality target measured against
    the large tier exactly.
    """

    def rebuilt(node: Node) -> Node:
        if not _in_chain(node):
            return node
        below = node.with_children((rebuilt(node.children[0]), *node.children[1:]))  # a join's right side kept
        if isinstance(below, Semantic) and below.cascades() is not None:
            fields = {name: getattr(below, name) for name in type(below).model_fields}
            return type(below).model_validate({**fields, "tier": "large", "quality": None})
        return below

    return rebuilt(limit.input)


def _chain(node: Node) -> list[Node]:
    """The row-wise semantic operators, relational filters, projections and factorized joins (down
    their left side) directly under a LIMIT."""
    chain: list[Node] = []
    while _in_chain(node):
        chain.append(node)
        node = node.children[0]
    return chain


def _in_chain(node: Node) -> bool:
    return is_row_semantic(node) or isinstance(node, Filter | Project) or _factorized(node)


def _factorized(node: Node) -> bool:
    return isinstance(node, SemJoin) and node.implementation == "factorized"


def _left_row_yield(join: SemJoin, wanted: float) -> float:
    """Rows a factorized join is expected to keep per left row when ``wanted`` rows must come out
    of it: ``SEMANTIC_JOIN_SELECTIVITY`` of its right rows, or 1 when the right side states no row
    count. A self-join (``operators/join_sides.is_self_join``) pairs its rounds' rows with each other: r rows
    give about ``s r^2`` pairs, so ``sqrt(wanted / s)`` rows are needed, ``sqrt(wanted s)`` pairs
    per row."""
    if is_self_join(join):
        return math.sqrt(max(wanted, 1.0) * SEMANTIC_JOIN_SELECTIVITY.value)
    right_rows = row_bound(join.right)
    return SEMANTIC_JOIN_SELECTIVITY.value * right_rows if right_rows else 1.0


def first_round_rows(limit: Limit) -> int | None:
    """Input rows (or a join's pairs) the first round trip under ``limit`` covers: about
    ``(count + offset) / selectivity`` of what lies directly under it; None when that holds no
    semantic operator the rounds can run (the LIMIT lowers to a plain ``LimitStage``).

    What lies under the LIMIT: row-wise semantic operators (cascaded ones too), relational filters
    and projections between them, perhaps ending in a SemJoin judged pair by pair (nested or
    blocked: the rounds count its pairs) or going through a factorized SemJoin (its right side is
    asked once, whole; the rounds count its left rows, each keeping
    ``SEMANTIC_JOIN_SELECTIVITY`` x its right rows, and go on down the left side). Lowering sees no
    measured statistics, so it takes the defaults of ``cost_model/cardinality.py``: a semantic
    filter keeps ``UNMEASURED_SELECTIVITY`` (0.5), a relational filter ``DEFAULT_FILTER_SELECTIVITY``
    (1/3), a join ``SEMANTIC_JOIN_SELECTIVITY`` (0.1) of its pairs; later rounds correct the
    estimate with the selectivity they see (`next_round`). Examples: ``sem_filter(a).sem_filter(b).limit(5)``
    asks 5 / (0.5 x 0.5) = 20 rows first, ``sem_join(...).limit(5)`` 50 pairs, a factorized join
    of 40 right rows 5 / (0.1 x 40) = 2 left rows, a factorized self-join ``sqrt(5 / 0.1)`` = 8 rows.
    """
    selectivity, semantic = 1.0, 0
    node: Node = limit.input
    while True:
        if is_row_semantic(node):
            semantic += 1
            if isinstance(node, Semantic) and node.task_kind() == TaskKind.FILTER:
                selectivity *= UNMEASURED_SELECTIVITY.value
        elif isinstance(node, Filter):
            selectivity *= DEFAULT_FILTER_SELECTIVITY.value
        elif isinstance(node, SemJoin) and node.implementation != "factorized":
            semantic += 1
            selectivity *= SEMANTIC_JOIN_SELECTIVITY.value
            break
        elif isinstance(node, SemJoin):  # factorized: rounds of its left rows, then down the left side
            semantic += 1
            selectivity *= _left_row_yield(node, (limit.count + limit.offset) / selectivity)
        elif not isinstance(node, Project):
            break
        node = node.children[0]
    if not semantic:
        return None
    return max(1, math.ceil((limit.count + limit.offset) / selectivity))


def runs_in_rounds(stage: Stage) -> bool:
    """Whether ``stage`` (a LIMIT's input, lowered) starts with a chain of stages the rounds can
    run (``stages.semantic.in_rounds``) that asks a model: what ``GrowingLimitStage`` runs on the driver."""
    semantic = False
    while in_rounds(stage):
        semantic = semantic or isinstance(stage, SemanticStage)
        stage = stage.inputs[0]
    return semantic
