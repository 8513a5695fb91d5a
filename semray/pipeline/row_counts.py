"""Counting the rows each logical operator passes on, for EXPLAIN after a run.

Lowering tags the stage that produces an operator's output with the operator's key
(``Stage.operators``); the pipeline reports each output batch of a tagged stage to one
``RowCounter`` actor per driver, and the driver takes an execution's totals when its rows
are in. Counting never fails a query: a counter that cannot be reached leaves EXPLAIN
without actual rows.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import ray
from ray.exceptions import RayError

from semray.log import get_logger
from semray.operators.schema import ROW_ID

log = get_logger(__name__)


@ray.remote(num_cpus=0)
class RowCounter:
    """The rows each operator passed on, per execution. Counted per batch: a batch reported
    again (a retried task, an input a cascade reads twice) replaces its first count."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[tuple[str, str], int]] = {}

    def add(self, execution: str, operators: tuple[str, ...], batch: str, rows: int) -> None:
        counted = self._rows.setdefault(execution, {})
        for operator in operators:
            counted[(operator, batch)] = rows

    def take(self, execution: str) -> dict[str, int]:
        totals: dict[str, int] = {}
        for (operator, _), rows in self._rows.pop(execution, {}).items():
            totals[operator] = totals.get(operator, 0) + rows
        return totals


@dataclass(frozen=True, slots=True)
class RowCounts:
    """Where one execution's tasks and actors report their rows."""

    counter: Any
    execution: str


_counters: dict[tuple[str, str], Any] = {}
"""This driver's counter per Ray cluster and job; held here, as an actor lives while a handle does."""


def new_execution() -> RowCounts:
    """Counts for one execution, on this driver's counter (started on first use)."""
    context = ray.get_runtime_context()
    owner = (context.get_node_id(), context.get_job_id())
    if owner not in _counters:
        _counters.clear()  # handles of an earlier cluster (ray.shutdown, then a new one)
        _counters[owner] = RowCounter.remote()  # type: ignore[attr-defined]
    return RowCounts(_counters[owner], uuid.uuid4().hex)


def count_rows(batch: pa.Table, counts: RowCounts, operators: tuple[str, ...]) -> pa.Table:
    """Report ``batch`` as output of ``operators`` and pass it on. Waits for the counter, so
    every batch the driver receives has been counted."""
    try:
        ray.get(counts.counter.add.remote(counts.execution, operators, batch_key(batch), batch.num_rows))
    except RayError as error:
        log.warning("row_count_lost", operators=list(operators), error=type(error).__name__)
    return batch


def take_counts(counts: RowCounts) -> dict[str, int]:
    """The rows each counted operator passed on in this execution (once: the counts are dropped)."""
    try:
        return dict(ray.get(counts.counter.take.remote(counts.execution)))
    except RayError as error:
        log.warning("row_counts_lost", error=type(error).__name__, note="EXPLAIN shows no actual rows")
        return {}


def batch_key(batch: pa.Table) -> str:
    """Names a batch by its row ids; the output batches of one stage hold disjoint rows.

    >>> batch_key(pa.table({"_rowid": ["7", "3", "5"]}))
    '3|7|3'
    """
    if not batch.num_rows:
        return "empty"
    if ROW_ID not in batch.column_names:
        return uuid.uuid4().hex
    bounds = pc.min_max(batch[ROW_ID])
    return f"{bounds['min'].as_py()}|{bounds['max'].as_py()}|{batch.num_rows}"
