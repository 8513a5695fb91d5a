"""EXPLAIN's actual rows: counting batches, and operators the pipeline does not count (no Ray)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

import semray
from semray.explaining import run_actuals
from semray.operators.keys import operator_key
from semray.operators.plan_paths import operator_paths
from semray.settings import Settings


@pytest.mark.parametrize(("kept", "limited"), [(4, 2), (2, 1), (1, 0)])
def test_projections_and_limits_take_their_rows_from_their_input(kept: int, limited: int) -> None:
    scan = semray.from_arrow(pa.table({"a": [1, 2, 3, 4, 5]}))
    filtered = scan.filter("a > 1")
    plan = filtered.limit(2, offset=1).select(b="a * 2").plan  # Project <- Limit <- Filter <- Scan
    counted = {operator_key(scan.plan): 5, operator_key(filtered.plan): kept}
    result = SimpleNamespace(operator_rows=counted, table=None, run_id=None)
    actuals = run_actuals(plan, Settings(), result)
    rows = {type(node).__name__: actuals[path].rows for path, node in operator_paths(plan).items()}
    # A limit's rows are min(count, input - offset); a projection keeps its input's.
    assert rows == {"Scan": 5, "Filter": kept, "Limit": limited, "Project": limited}


def test_nothing_counted_gives_no_actual_rows() -> None:
    plan = semray.from_arrow(pa.table({"a": [1]})).filter("a > 0").plan
    assert run_actuals(plan, Settings(), SimpleNamespace(operator_rows={}, table=None, run_id=None)) == {}


def test_a_batch_counted_twice_counts_once(tmp_path: Path) -> None:
    from semray.pipeline.workers.row_counts import count_rows, new_execution, take_counts

    counts, other = new_execution(tmp_path), new_execution(tmp_path)
    batch = pa.table({"_rowid": ["a", "b", "c"]})
    for _ in range(2):  # a retried task reports its batch again
        count_rows(batch, counts, ("op",))
    count_rows(pa.table({"_rowid": ["d"]}), counts, ("op", "other"))
    count_rows(batch.slice(0, 0), counts, ("empty",))
    count_rows(batch, other, ("op",))
    assert take_counts(counts) == {"op": 4, "other": 1, "empty": 0}
    assert take_counts(counts) == {}, "an execution's counts are taken once"
    assert take_counts(other) == {"op": 3}, "executions are counted apart"
