"""A factorized self-join as a step of a LIMIT's rounds (``pipeline/ray/limit_rounds._self_join_step``):
after any sequence of rounds every pair among the rows seen so far came out exactly once."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from semray.pipeline.ray.limit_rounds import _self_join_step
from semray.pipeline.ray.materialize import ExecutionContext
from semray.pipeline.stages.relational import SelfJoinStage

SQL = (
    "SELECT l._rowid || '*' || r._rowid AS _rowid, l.k AS k, r.k AS k_right "
    "FROM batch AS l JOIN right_side AS r ON (lower(trim(l._fk)) = lower(trim(r._fk)))"
)


def test_every_pair_among_the_rows_seen_comes_out_once() -> None:
    labels = ["a", "b", "a", "a", "b", "c", "a"]
    rows = pa.table({"_rowid": [f"r{i}" for i in range(7)], "k": list(range(7)), "_fk": labels})
    stage = SelfJoinStage(sql=SQL, right_columns=(("_rowid", "VARCHAR"), ("k", "BIGINT"), ("_fk", "VARCHAR")))
    step = _self_join_step(stage, ExecutionContext())
    out = [step(rows.slice(0, 1)), step(rows.slice(1, 2)), step(rows.slice(3, 4))]
    pairs = Counter(
        (a, b)
        for table in out
        for a, b in zip(table.column("k").to_pylist(), table.column("k_right").to_pylist(), strict=True)
    )
    expected = {(a, b) for a in range(7) for b in range(7) if labels[a] == labels[b]}
    assert set(pairs) == expected and set(pairs.values()) == {1}
    first = {(a, b) for a, b in zip(out[0].column("k").to_pylist(), out[0].column("k_right").to_pylist(), strict=True)}
    assert first == {(0, 0)}  # one row: only itself
