"""The ledger as the pipeline uses it: held by Ray Data actors that commit and look up batches."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from semray.settings import Settings
from semray.transactions import BatchLedger, LLMUsage, batch_key, begin_run, resume_run, show_run

pytestmark = pytest.mark.ray

OPERATOR = "sem_map-0"


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    from ray import cloudpickle

    # Workers cannot import this test module (tests/ is not a package): ship its classes by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, _temp_dir="/tmp/sr-tx", configure_logging=False)
    yield
    if started:
        ray.shutdown()


class ScoreWithLedger:
    """A stand-in for a semantic UDF: computes (and 'pays' for) a batch only when not committed."""

    def __init__(self, ledger: BatchLedger) -> None:
        self.ledger = ledger

    def __call__(self, batch: pa.Table) -> pa.Table:
        # Row-level lookup: a re-run may cut batches differently, yet pays only for new rows.
        found = self.ledger.lookup_rows(OPERATOR, batch.column("_rowid").to_pylist())
        parts = []
        if found.table is not None:
            parts.append(found.table.append_column("paid", pa.repeat(False, found.table.num_rows)))
        if found.missing:
            todo = batch.filter(pc.is_in(batch.column("_rowid"), value_set=pa.array(found.missing)))
            scored = todo.append_column("score", pc.utf8_length(todo.column("text")))
            key = batch_key(OPERATOR, found.missing)
            self.ledger.commit(OPERATOR, key, found.missing, scored, LLMUsage(calls=todo.num_rows))
            parts.append(scored.append_column("paid", pa.repeat(True, scored.num_rows)))
        return pa.concat_tables(parts)


def run_pipeline(ledger: BatchLedger, source: pa.Table) -> pa.Table:
    import ray.data

    dataset = ray.data.from_arrow(source).map_batches(
        ScoreWithLedger,
        fn_constructor_args=(ledger,),
        batch_size=10,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=1),
    )
    return pa.concat_tables(ray.get(dataset.to_arrow_refs()))


def test_actors_commit_and_a_resume_pays_nothing_again(local_ray: None, tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    row_ids = [f"r{index:03d}" for index in range(60)]
    source = pa.table({"_rowid": row_ids, "text": ["x" * index for index in range(60)]})
    run = begin_run(settings, {"op": "sem_map"}, None)
    first = run_pipeline(run.ledger, source)
    assert first.num_rows == 60 and all(first.column("paid").to_pylist())
    run.close()  # as if the driver died after the work
    detail = show_run(settings, run.run_id)
    assert (detail.status, detail.rows_committed, detail.usage.calls) == ("interrupted", 60, 60)
    with resume_run(settings, run.run_id) as again:
        second = run_pipeline(again.ledger, source)
    assert second.num_rows == 60 and not any(second.column("paid").to_pylist()), "nothing paid twice"
    assert sorted(second.column("score").to_pylist()) == sorted(first.column("score").to_pylist())
    assert show_run(settings, run.run_id).usage.calls == 60
