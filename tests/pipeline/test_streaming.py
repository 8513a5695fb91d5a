"""LIMIT streams: a limited query over a large scan stops reading early."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray

import semray
from semray.pipeline.lowering.driver import lower
from semray.pipeline.ray.materialize import materialize
from semray.settings import Settings

pytestmark = pytest.mark.ray

ROWS = 1_000_000
BATCH = 1_000


def test_limit_reads_only_batches_in_flight(tmp_path: Path, ray_settings: Settings) -> None:
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"a": pa.array(range(ROWS), pa.int64())}), path, row_group_size=BATCH)
    settings = ray_settings.model_copy(update={"batch_size": BATCH})
    query = semray.read_parquet(path, settings=settings).filter("a % 2 = 0").limit(10)
    dataset = materialize(lower(query.plan, settings))
    result = pa.concat_tables(ray.get(dataset.to_arrow_refs()))
    assert result.num_rows == 10
    summary = dataset._get_stats_summary()
    upstream = [op for parent in summary.parents for op in parent.operators_stats]
    filtered = sum(op.output_num_rows.sum for op in upstream if "Read" in op.operator_name)
    read_rows = filtered * 2  # the filter keeps half the rows
    in_flight = ray.cluster_resources()["CPU"] * 2  # running tasks and their streaming buffers
    assert read_rows <= (in_flight + 1) * BATCH * 4, f"read {read_rows} of {ROWS} rows for LIMIT 10"
    assert read_rows < ROWS / 20
