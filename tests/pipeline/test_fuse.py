"""Physical plans are snapshot-tested without a cluster: fusion of per-batch SQL."""

from __future__ import annotations

import pyarrow as pa

import semray
from semray.pipeline.fuse import nest
from semray.pipeline.lower import lower
from semray.pipeline.spec import BatchSqlStage, ReadStage, render_stages
from semray.settings import Settings


def test_chains_of_batch_sql_become_one_statement() -> None:
    query = semray.from_arrow(pa.table({"a": [1], "b": ["x"]})).filter("a > 1").select("a", c="b || '!'").filter("c <> 'z'")
    stage = lower(query.plan, Settings())
    assert isinstance(stage, BatchSqlStage) and isinstance(stage.inputs[0], ReadStage)
    assert render_stages(stage).splitlines()[0] == (
        "BatchSql[filter + project + filter] SELECT * FROM (SELECT _rowid, (a) AS \"a\", (b || '!') AS \"c\" "
        "FROM (SELECT * FROM batch WHERE (a > 1)) AS batch) AS batch WHERE (c <> 'z')"
    )


def test_nest_replaces_only_the_table_not_strings() -> None:
    fused = nest("SELECT a FROM batch WHERE s = 'FROM batch'", "SELECT * FROM batch")
    assert fused == "SELECT a FROM (SELECT * FROM batch) AS batch WHERE s = 'FROM batch'"
    assert nest("SELECT l.a FROM batch AS l", "SELECT 1 AS a FROM batch") == "SELECT l.a FROM (SELECT 1 AS a FROM batch) AS l"
