"""The keys of operators: where one sits in a plan, what one asks wherever it sits, and a source.

`operator_key`: the same operator over the same input, the same key. Lowering tags each stage
with the keys of the operators it computes, the run journal commits a semantic operator's
batches under its key (so a resume reuses them only for that operator over
that input), and EXPLAIN reads the rows each operator passed on by it. What an operator asks,
wherever it sits, is its `statistics_key`: the node's JSON *without its inputs* (and without
its tier, cascade target and diagnostics flag), under which the cost model keeps what it measured
(`semray.cost_model.statistics.PlanStatistics`). `source_key` names a Scan's source there.

>>> from semray.operators import Scan, SemFilter, Schema, SourceSpec
>>> scan = Scan(source=SourceSpec(kind="csv", path="r.csv"), source_schema=Schema.of(("review", "VARCHAR")))
>>> a = SemFilter(input=scan, instruction="{review} is positive")
>>> b = SemFilter(input=a, instruction="{review} is positive", tier="small")
>>> statistics_key(a) == statistics_key(b), operator_key(a) == operator_key(b)
(True, False)
>>> source_key(scan)
'csv:r.csv'
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from semray.operators.base import Node
from semray.operators.relational import Scan


def operator_key(node: Node) -> str:
    """Identifies an operator and its whole input, so committed rows are reused only for it."""
    return hashlib.sha256(node.model_dump_json().encode()).hexdigest()[:24]


KEY_EXCLUDED_FIELDS = frozenset({"tier", "diagnostics"})
"""Fields left out of `statistics_key` besides the inputs: they change who answers, not the question."""
KEY_NEUTRAL_FIELDS = frozenset({"quality"})
"""Fields hashed at their default (None) whatever their value: a cascade target, like a tier,
changes who answers, not the question. Hashing the default (rather than leaving the field out)
keeps the keys of operators without a target as they were."""


def statistics_key(node: Node) -> str:
    """A stable key for what ``node`` asks of its input, independent of where it sits.

    The sha256 of the node's JSON without its child fields, ``tier`` and ``diagnostics``, with
    ``quality`` (a cascade's target) as None.
    """
    excluded = set(node.child_fields) | (KEY_EXCLUDED_FIELDS & set(type(node).model_fields))
    payload: dict[str, Any] = node.model_dump(mode="json", exclude=excluded)
    payload.update(dict.fromkeys(KEY_NEUTRAL_FIELDS & payload.keys()))
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def source_key(scan: Scan) -> str:
    """The key of a Scan's source in ``source_rows``: ``kind:path`` (memory tables: their digest ref)."""
    ref = scan.source.options.get("ref")
    if scan.source.kind == "memory" and ref is not None:
        return f"memory:{ref}"
    return scan.source.describe()
