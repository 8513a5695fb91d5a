"""Counting the rows each logical operator passes on, for EXPLAIN after a run.

Lowering tags the stage that produces an operator's output with the operator's key
(``Stage.operators``); the pipeline appends one line per output batch of a tagged stage to
the execution's count file under the state folder, and the driver sums the file once the
rows are in. A line is written before the batch moves on, so every batch the driver
received is counted. Tasks and actors must see the state folder, as they see a run's
ledger. Counting never fails a query: a count that cannot be written or read is logged and
EXPLAIN shows fewer actual rows (none when the file is unreadable).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from semray.log import get_logger
from semray.transactions.batches import ROW_ID  # operators.schema's, without the plan layer in every actor

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RowCounts:
    """Where one execution's tasks and actors report their rows: a file of JSON lines."""

    path: str


def new_execution(state_path: Path) -> RowCounts:
    folder = state_path / "row_counts"
    folder.mkdir(parents=True, exist_ok=True)
    return RowCounts(str(folder / f"{uuid.uuid4().hex}.jsonl"))


def count_rows(batch: pa.Table, counts: RowCounts, operators: tuple[str, ...]) -> pa.Table:
    """Report ``batch`` as output of ``operators`` and pass it on."""
    line = json.dumps([list(operators), batch_key(batch), batch.num_rows]) + "\n"
    try:
        # One write of one short line with O_APPEND: lines of concurrent writers do not interleave.
        descriptor = os.open(counts.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line.encode())
        finally:
            os.close(descriptor)
    except OSError as error:
        log.warning("row_count_lost", operators=list(operators), error=str(error))
    return batch


def take_counts(counts: RowCounts) -> dict[str, int]:
    """The rows each counted operator passed on in this execution; the file is removed.

    A batch reported twice (a retried task, an input a cascade reads twice) counts once.
    """
    path = Path(counts.path)
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        path.unlink(missing_ok=True)
    except OSError as error:
        log.warning("row_counts_lost", error=str(error), note="EXPLAIN shows no actual rows")
        return {}
    by_batch: dict[tuple[str, str], int] = {}
    for line in text.splitlines():
        operators, key, rows = json.loads(line)
        for operator in operators:
            by_batch[(operator, key)] = rows
    totals: dict[str, int] = {}
    for (operator, _), rows in by_batch.items():
        totals[operator] = totals.get(operator, 0) + rows
    return totals


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
