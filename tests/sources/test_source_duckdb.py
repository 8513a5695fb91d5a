from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from semray.errors import SourceError
from semray.sources import open_source


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.duckdb"
    connection = duckdb.connect(str(path))
    connection.execute(
        "CREATE TABLE reviews AS SELECT range AS id, 'review ' || range || ' é' AS body, "
        "CASE WHEN range % 3 = 0 THEN NULL ELSE range / 2 END AS stars FROM range(20)"
    )
    connection.execute("CREATE TABLE empty (a INTEGER)")
    connection.execute("CREATE SCHEMA other")
    connection.execute("CREATE TABLE other.t AS SELECT 1 AS x")
    connection.execute("CREATE VIEW good AS SELECT id FROM reviews WHERE stars >= 5")
    connection.close()
    return path


def test_table(db, read_all):
    source = open_source("duckdb", str(db), {"table": "reviews"})
    assert source.schema() == pa.schema([("id", pa.int64()), ("body", pa.string()), ("stars", pa.float64())])
    assert source.estimated_rows() == 20
    table = read_all(source, None, 7)
    assert table.column("_rowid").to_pylist() == [str(i) for i in range(20)]
    assert table.column("stars").to_pylist()[:3] == [None, 0.5, 1.0]
    assert source.invalid_utf8_count() == 0


@pytest.mark.parametrize(("batch_rows", "task_rows"), [(1, 5), (3, 6), (100, 1000)])
def test_rowids_independent_of_tasks(db, rowids, batch_rows, task_rows):
    source = open_source("duckdb", str(db), {"table": "reviews", "task_rows": task_rows})
    assert len(source.read_tasks(None, batch_rows)) == -(-20 // task_rows)
    assert rowids(source, batch_rows) == [str(i) for i in range(20)]


def test_columns_subset(db, read_all):
    source = open_source("duckdb", str(db), {"table": "reviews"})
    assert read_all(source, ["stars", "id"]).column_names == ["_rowid", "id", "stars"]
    assert read_all(source, [], 6).num_rows == 20
    query = open_source("duckdb", str(db), {"query": "SELECT id FROM reviews"})
    assert read_all(query, [], 6).column_names == ["_rowid"]
    assert read_all(query, [], 6).num_rows == 20


def test_query_and_view(db, read_all):
    source = open_source("duckdb", str(db), {"query": "SELECT id * 10 AS x FROM reviews ORDER BY id DESC"})
    table = read_all(source, None, 4)
    assert table.column("_rowid").to_pylist() == [str(i) for i in range(20)]
    assert table.column("x").to_pylist()[0] == 190
    view = read_all(open_source("duckdb", str(db), {"table": "good"}))
    assert view.column("id").to_pylist() == [10, 11, 13, 14, 16, 17, 19]


def test_schema_qualified_table(db, read_all):
    assert read_all(open_source("duckdb", str(db), {"table": "other.t"})).to_pylist() == [{"_rowid": "0", "x": 1}]


def test_missing_table_suggests(db):
    with pytest.raises(SourceError, match="did you mean 'reviews'"):
        open_source("duckdb", str(db), {"table": "reveiws"})


def test_empty_table(db):
    with pytest.raises(SourceError, match="empty"):
        open_source("duckdb", str(db), {"table": "empty"})


def test_bad_query(db):
    with pytest.raises(SourceError, match="query"):
        open_source("duckdb", str(db), {"query": "SELECT nope FROM reviews"})


def test_rowid_column_is_rejected(tmp_path):
    path = tmp_path / "r.duckdb"
    connection = duckdb.connect(str(path))
    connection.execute('CREATE TABLE t AS SELECT 1 AS "_rowid"')
    connection.close()
    with pytest.raises(SourceError, match="_rowid"):
        open_source("duckdb", str(path), {"table": "t"})
