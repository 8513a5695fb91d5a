"""Rough row counts of plan nodes, for choosing between one-task and shuffled stages.

Upper bounds from source metadata; the cost model (importance-sampled estimates with
intervals) replaces these once it exists.
"""

from __future__ import annotations

import functools

from semray.operators.base import Node
from semray.operators.relational import Join, Limit, Scan, SourceSpec, Union
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


def fits_one_task(node: Node, limit: int) -> bool:
    count = estimate_rows(node)
    return count is not None and count <= limit
