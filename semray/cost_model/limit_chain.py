"""The chain a LIMIT's round trips run, as lowering sizes it and the cost model prices it.

Under a ``LIMIT k`` over a chain of semantic operators (row-wise ones, relational filters and
projections between them, through a factorized join's left side, perhaps ending in a pair join),
execution asks the model in round trips that grow from about ``k / selectivity`` rows
(``first_round_rows``). A cascade in that chain, when the LIMIT needs no more rows than its
calibration would label (``limit_first_rows``), runs on the large tier row by row instead
(``limit_chain``). `limit_input` is that one rule: lowering (``pipeline/lowering/relational.limit_inputs``)
lowers what it returns, and the cost model (``plan_cost.estimate_plan``) prices what it returns, so
EXPLAIN and ``--max-cost`` price the tier the run will use.

>>> from semray.operators import Limit, Scan, SemFilter, Schema, SourceSpec
>>> from semray.operators.quality_targets import QualityTarget
>>> scan = Scan(source=SourceSpec(kind="csv", path="r.csv"), source_schema=Schema.of(("review", "VARCHAR")))
>>> cascade = SemFilter(input=scan, instruction="{review} is positive", quality=QualityTarget(level=0.9))
>>> limit_input(Limit(input=cascade, count=5)).tier, limit_input(Limit(input=cascade, count=500)).tier
('large', 'auto')
"""

from __future__ import annotations

import math

from semray.cost_model.cardinality import (
    DEFAULT_FILTER_SELECTIVITY,
    SEMANTIC_JOIN_SELECTIVITY,
    UNMEASURED_SELECTIVITY,
    row_bound,
)
from semray.operators.base import Node, transform, walk
from semray.operators.join_sides import is_self_join
from semray.operators.relational import Filter, Limit, Project
from semray.operators.semantic import Semantic, SemJoin, is_row_semantic
from semray.tasks import TaskKind


def limit_input(limit: Limit) -> Node:
    """What runs under ``limit``: its input, with every cascade of the chain under it on the large
    tier when the LIMIT needs no more rows than the cascade's calibration would label (`limit_chain`)."""
    if not any(isinstance(node, Semantic) and node.cascades() is not None for node in _chain(limit.input)):
        return limit.input  # nothing to put on the large tier (and no source metadata to read)
    on_large = first_round_rows(limit) is not None and limit_first_rows(limit) is not None
    return limit_chain(limit) if on_large else limit.input


def limits_as_run(plan: Node) -> Node:
    """``plan`` with every LIMIT's input as `limit_input` runs it (same shape, same paths): what the
    cost model prices."""

    if not any(isinstance(node, Limit) and limit_input(node) is not node.input for node in walk(plan)):
        return plan  # the common case: nothing to rewrite, no node rebuilt (the planner estimates often)

    def rewrite(node: Node) -> Node:
        if isinstance(node, Limit):
            ran = limit_input(node)
            return node if ran is node.input else node.with_children((ran,))
        return node

    return transform(plan, rewrite)


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
