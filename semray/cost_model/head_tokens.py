"""Prompt tokens per row counted on a source's first rows: a figure the plan can have before any run.

A cascade's proxy pass embeds every row, so its projected wall time (`semray.cost_model.cascade_wall`)
is about the text's length; the cost model's default (100 tokens a cell, `semantic_cost`) is off by
a factor of 2-3 for short texts (the medical symptoms: 40). `head_token_statistics` counts the
prompt tokens of an operator whose every referenced column comes from the one Scan below it, on
the first ``rows`` rows that source yields (one read, no model call), as
`semray.cost_model.measure` would on a sample. The head of a source is not a uniform sample (a
sorted file's first rows may be shorter than the rest): the figure is a point value with the
interval of the rows counted, kept only where nothing better was measured.

>>> head_token_statistics(SemFilter(input=Values(...), instruction="{x} is red"), [])  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from semray.cost_model.estimates import Interval
from semray.cost_model.statistics import PlanStatistics
from semray.cost_model.tokens import PromptTokens
from semray.errors import SemrayError
from semray.log import get_logger
from semray.operators.base import Node, walk
from semray.operators.keys import statistics_key
from semray.operators.relational import Scan
from semray.operators.semantic import Semantic

log = get_logger(__name__)

HEAD_ROWS = 64
"""Rows counted per operator: enough for a mean within about 10% on texts of a similar length."""


def head_token_statistics(nodes: Sequence[Node], known: PlanStatistics, rows: int = HEAD_ROWS) -> PlanStatistics:
    """``tokens_per_row`` of each of ``nodes`` whose tokens ``known`` lacks, counted on the first
    ``rows`` rows of the one Scan it reads (operators over joins, or over columns a step above the
    Scan computes, are left out)."""
    found: dict[str, Interval] = {}
    counter = PromptTokens()
    for node in nodes:
        key = statistics_key(node)
        if key in known.tokens_per_row or key in found or not isinstance(node, Semantic):
            continue
        table = _head(node, rows)
        if table is None or table.num_rows == 0:
            continue
        counts = counter.count_rows(node, table.to_pylist())
        found[key] = Interval(float(counts.mean()), float(counts.min()), float(counts.max()))
        log.debug("head_tokens", operator=node.label(), rows=table.num_rows, tokens=round(found[key].value, 1))
    return PlanStatistics(tokens_per_row=found)


def _head(node: Semantic, rows: int) -> pa.Table | None:
    """The first ``rows`` rows of the columns ``node`` reads, from the one Scan below it that has
    them all; None when there is no such Scan or it cannot be read."""
    scans = [scan for scan in walk(node.input) if isinstance(scan, Scan)]
    columns = sorted(node.columns_read())
    if len(scans) != 1 or not set(columns) <= set(scans[0].source_schema.names):
        return None
    from semray.sources import open_source  # sources import the readers; only needed here

    scan = scans[0]
    try:
        source = open_source(scan.source.kind, scan.source.path, scan.source.options)
        for task in source.read_tasks(columns, rows):
            for batch in task():
                return batch.slice(0, rows)
    except (SemrayError, OSError, ValueError, KeyError, pa.ArrowException) as error:
        log.info("head_tokens_unread", operator=node.label(), error=str(error))
    return None
