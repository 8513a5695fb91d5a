"""Physical plans are snapshot-tested without a cluster: fusion of per-batch SQL."""

from __future__ import annotations

import pyarrow as pa

import semray
from semray.operators.keys import operator_key
from semray.pipeline.lowering.driver import lower
from semray.pipeline.lowering.fuse import nest
from semray.pipeline.stages.base import render_stages
from semray.pipeline.stages.relational import BatchSqlStage, ReadStage
from semray.settings import Settings


def test_chains_of_batch_sql_become_one_statement() -> None:
    query = semray.from_arrow(pa.table({"a": [1], "b": ["x"]})).filter("a > 1").select("a", c="b || '!'").select("c")
    stage = lower(query.plan, Settings())
    assert isinstance(stage, BatchSqlStage) and isinstance(stage.inputs[0], ReadStage)
    assert render_stages(stage).splitlines()[0] == (
        'BatchSql[filter + project + project] SELECT _rowid, (c) AS "c" FROM (SELECT _rowid, (a) AS "a", '
        "(b || '!') AS \"c\" FROM (SELECT * FROM batch WHERE (a > 1)) AS batch) AS batch"
    )


def test_a_filter_stays_countable_a_projection_fuses_over_it() -> None:
    # EXPLAIN after a run shows each filter's rows: a filter over a filter keeps its own stage,
    # a projection (one row per row) fuses into the filter's and carries no count of its own.
    base = semray.from_arrow(pa.table({"a": [1], "b": ["x"]})).filter("a > 1")
    projected = base.select("a", c="b || '!'")
    stage = lower(projected.filter("c <> 'z'").plan, Settings())
    assert [line.split("]")[0].strip() for line in render_stages(stage).splitlines()] == [
        "BatchSql[filter",
        "BatchSql[filter + project",
        "Read memory:arrow table (batches of 65536)",
    ]
    outer, inner = stage, stage.inputs[0]
    assert isinstance(outer, BatchSqlStage) and isinstance(inner, BatchSqlStage)
    assert outer.operators == (operator_key(projected.filter("c <> 'z'").plan),)
    assert inner.operators == (operator_key(base.plan),) and inner.keeps_rows is False
    assert inner.inputs[0].operators == (operator_key(base.plan.children[0]),)  # the scan


def test_nest_replaces_only_the_table_not_strings() -> None:
    fused = nest("SELECT a FROM batch WHERE s = 'FROM batch'", "SELECT * FROM batch")
    assert fused == "SELECT a FROM (SELECT * FROM batch) AS batch WHERE s = 'FROM batch'"
    assert (
        nest("SELECT l.a FROM batch AS l", "SELECT 1 AS a FROM batch")
        == "SELECT l.a FROM (SELECT 1 AS a FROM batch) AS l"
    )
