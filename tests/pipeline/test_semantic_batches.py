"""How many rows a semantic operator sends per model round trip (lowering only, no Ray)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import semray
from semray.pipeline.lower import lower
from semray.pipeline.spec import SemanticStage, Stage
from semray.settings import Settings


def semantic_batches(stage: Stage) -> list[int]:
    found = [stage.batch_rows] if isinstance(stage, SemanticStage) else []
    return found + [rows for child in stage.inputs for rows in semantic_batches(child)]


def tickets(tmp_path: Path, rows: int) -> Path:
    path = tmp_path / f"t{rows}.parquet"
    pq.write_table(pa.table({"text": [f"ticket {i}" for i in range(rows)]}), path)
    return path


def test_batches_grow_with_the_input_and_stay_small_under_a_limit(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    small = semray.read_parquet(tickets(tmp_path, 500)).sem_filter("{text} is urgent")
    large = semray.read_parquet(tickets(tmp_path, 100_000)).sem_filter("{text} is urgent")
    assert semantic_batches(lower(small.plan, settings)) == [32]  # 500 rows: 2 actors x 16 batches is 15 rows each
    assert semantic_batches(lower(large.plan, settings)) == [256]
    assert semantic_batches(lower(large.limit(10).plan, settings)) == [32]
    assert semantic_batches(lower(large.plan, settings.model_copy(update={"semantic_batch_max": 32}))) == [32]
    middle = semray.read_parquet(tickets(tmp_path, 4_000)).sem_filter("{text} is urgent")
    assert semantic_batches(lower(middle.plan, settings)) == [125]  # 4,000 / (2 actors x 16)
