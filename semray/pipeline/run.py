"""Running a logical plan: connect, lower, build the Ray Data pipeline, deliver rows."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from semray.cluster.connect import connect
from semray.errors import LoweringError
from semray.log import get_logger
from semray.operators.base import Node
from semray.pipeline import materialize
from semray.pipeline.lower import lower
from semray.pipeline.spec import render_stages
from semray.settings import Settings

log = get_logger(__name__)


def explain_physical(plan: Node, settings: Settings) -> str:
    try:
        stages = lower(plan, settings)
    except LoweringError as error:
        return f"Physical plan: not available ({error})"
    return "Physical plan (Ray Data)\n" + render_stages(stages)


def collect(plan: Node, settings: Settings) -> pa.Table:
    stages = lower(plan, settings)
    connect(settings)
    started = time.perf_counter()
    table = materialize.collect(stages, plan.output_schema.to_arrow())
    log.info("query_finished", rows=table.num_rows, seconds=round(time.perf_counter() - started, 3))
    return table


def iter_batches(plan: Node, settings: Settings, batch_rows: int | None = None) -> Iterator[pa.Table]:
    stages = lower(plan, settings)
    connect(settings)
    return materialize.iter_batches(stages, plan.output_schema.to_arrow(), batch_rows or settings.batch_size)


def write_parquet(plan: Node, settings: Settings, path: Path) -> int:
    """Stream results into ``path`` atomically: a temp file in the same folder, then rename."""
    path = path.expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = plan.output_schema.to_arrow()
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    rows = 0
    try:
        with pq.ParquetWriter(temporary, schema) as writer:
            for batch in iter_batches(plan, settings):
                writer.write_table(batch)
                rows += batch.num_rows
        with open(temporary, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    log.info("parquet_written", path=str(path), rows=rows)
    return rows
