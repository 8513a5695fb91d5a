"""Column pruning keeps what a semantic aggregate groups by (its keys are read, not only its template)."""

from __future__ import annotations

import pyarrow as pa

from semray.api import from_arrow
from semray.planner import optimize


def test_pruning_keeps_semagg_keys() -> None:
    query = from_arrow(pa.table({"text": ["a", "b"], "shard": [1, 2], "unused": [0, 0]}))
    plan = query.sem_agg("count the {text}", by=["shard"]).plan
    assert optimize(plan).output_schema == plan.output_schema
