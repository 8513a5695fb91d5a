"""Rough row counts of plan nodes, for choosing between one-task and shuffled stages.

Upper bounds from source metadata; the cost model (importance-sampled estimates with
intervals) replaces these once it exists.
"""

from __future__ import annotations

import functools
import math

from semray.operators.base import Node
from semray.operators.relational import Join, Limit, Scan, SourceSpec, Union
from semray.settings import Settings
from semray.sources import open_source


def estimate_rows(node: Node) -> int | None:
    """An upper-bound-ish row count, or None when a source cannot tell."""
    if isinstance(node, Scan):
        return _source_rows(node.source)
    children = [estimate_rows(child) for child in node.children]
    if any(count is None for count in children):
        return None
    counts = [count for count in children if count is not None]
    if isinstance(node, Limit):
        return min(counts[0], node.count + node.offset)
    if isinstance(node, Union):
        return sum(counts)
    if isinstance(node, Join):
        return max(counts)
    return counts[0] if counts else None


@functools.lru_cache(maxsize=256)
def _source_rows(spec: SourceSpec) -> int | None:
    return open_source(spec.kind, spec.path, spec.options).estimated_rows()


BATCHES_PER_ACTOR = 16
"""A semantic operator's batches grow only while each actor still gets about this many."""


def semantic_batch_rows(node_input: Node, settings: Settings) -> int:
    """Rows per model round trip for a semantic operator over ``node_input``.

    ``semantic_batch_size`` on small or unknown inputs; over a large input, bigger batches
    (up to ``semantic_batch_max``) while every actor still gets `BATCHES_PER_ACTOR` of them:
    fewer round trips, fewer Ray tasks and ledger commits per row. A LIMIT above the operator
    lowers its input with ``semantic_batch_max`` equal to ``semantic_batch_size`` (so a
    ``sem_filter ... LIMIT k`` stops after a few small batches). Examples:
    tests/pipeline/test_semantic_batches.py.
    """
    rows = estimate_rows(node_input)
    smallest, largest = settings.semantic_batch_size, settings.semantic_batch_max
    if rows is None or largest <= smallest:
        return smallest
    return max(smallest, min(largest, rows // (settings.semantic_actors * BATCHES_PER_ACTOR)))


def fits_one_task(node: Node, limit: int) -> bool:
    count = estimate_rows(node)
    return count is not None and count <= limit


LIMIT_GROWTH = 2
"""Under a LIMIT, each round trip of a semantic chain covers this many times the rows of the last."""


def limit_first_rows(limit: Limit) -> int | None:
    """Input rows the first round trip of a ``LIMIT`` over a chain of row-wise semantic operators
    covers: about ``(count + offset) / selectivity`` of the chain; None when ``limit.input`` is no
    such chain (it lowers to a plain ``LimitStage``).

    The chain is what lies directly under the LIMIT: row-wise semantic operators without a quality
    target (a cascade blocks the stream anyway), relational filters and projections between them,
    at least one semantic operator. Lowering sees no measured statistics, so each semantic filter
    counts at the cost model's ``UNMEASURED_SELECTIVITY`` (0.5) and each relational filter at its
    ``DEFAULT_FILTER_SELECTIVITY`` (1/3); maps, classifications and extractions keep every row.
    Example: ``sem_filter(a).sem_filter(b).limit(5)`` asks 5 / (0.5 x 0.5) = 20 rows first.
    """
    from semray.cost_model.plan_cost import UNMEASURED_SELECTIVITY
    from semray.cost_model.relational_cost import DEFAULT_FILTER_SELECTIVITY
    from semray.operators.relational import Filter, Project
    from semray.operators.semantic import Semantic, SemClassify, SemExtract, SemFilter, SemMap

    selectivity, semantic = 1.0, 0
    node: Node = limit.input
    while True:
        if isinstance(node, SemFilter | SemMap | SemClassify | SemExtract):
            assert isinstance(node, Semantic)
            if node.cascades() is not None:
                return None
            semantic += 1
            if isinstance(node, SemFilter):
                selectivity *= UNMEASURED_SELECTIVITY.value
        elif isinstance(node, Filter):
            selectivity *= DEFAULT_FILTER_SELECTIVITY.value
        elif not isinstance(node, Project):
            break
        node = node.children[0]
    if not semantic:
        return None
    return max(1, math.ceil((limit.count + limit.offset) / selectivity))
