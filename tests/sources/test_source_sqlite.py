from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from semray.errors import SourceError
from semray.sources import open_source


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE reviews (id INTEGER, body TEXT, stars REAL, raw BLOB, misc)")
        rows = [(i, f"review {i} é", i / 2, bytes([i]), i) for i in range(1, 11)]
        connection.executemany("INSERT INTO reviews VALUES (?, ?, ?, ?, ?)", rows)
        connection.execute("INSERT INTO reviews VALUES (NULL, NULL, NULL, NULL, NULL)")
        connection.execute("DELETE FROM reviews WHERE id = 3")  # rowids keep a gap
        connection.execute("CREATE TABLE empty (a INTEGER)")
        connection.execute("CREATE TABLE keyed (k TEXT PRIMARY KEY, v INTEGER) WITHOUT ROWID")
        connection.executemany("INSERT INTO keyed VALUES (?, ?)", [("b", 2), ("a", 1)])
        connection.execute("CREATE VIEW good AS SELECT id, body FROM reviews WHERE stars >= 3")
    connection.close()
    return path


def test_table_uses_rowids(db, read_all):
    source = open_source("sqlite", str(db), {"table": "reviews"})
    assert source.schema() == pa.schema(
        [("id", pa.int64()), ("body", pa.string()), ("stars", pa.float64()), ("raw", pa.binary()), ("misc", pa.int64())]
    )
    assert source.estimated_rows() == 10
    table = read_all(source)
    assert table.column("_rowid").to_pylist() == ["1", "2", "4", "5", "6", "7", "8", "9", "10", "11"]
    assert table.column("body").to_pylist()[0] == "review 1 é"
    assert table.to_pylist()[-1] == {"_rowid": "11", "id": None, "body": None, "stars": None, "raw": None, "misc": None}


@pytest.mark.parametrize(("batch_rows", "task_rows"), [(1, 1), (3, 4), (100, 1000)])
def test_rowids_independent_of_tasks(db, rowids, batch_rows, task_rows):
    source = open_source("sqlite", str(db), {"table": "reviews", "task_rows": task_rows})
    assert len(source.read_tasks(None, batch_rows)) == -(-10 // task_rows) or task_rows == 1
    assert rowids(source, batch_rows) == ["1", "2", "4", "5", "6", "7", "8", "9", "10", "11"]


def test_columns_subset(db, read_all):
    source = open_source("sqlite", str(db), {"table": "reviews"})
    assert read_all(source, ["stars", "id"], 4).column_names == ["_rowid", "id", "stars"]
    assert read_all(source, [], 4).num_rows == 10


def test_query_numbers_rows(db, read_all):
    source = open_source("sqlite", str(db), {"query": "SELECT id, stars * 2 AS double FROM reviews ORDER BY id DESC;"})
    assert source.estimated_rows() is None
    table = read_all(source, None, 3)
    assert table.column("_rowid").to_pylist() == [str(i) for i in range(10)]
    assert table.column("id").to_pylist()[:2] == [10, 9]


def test_without_rowid_table_and_view(db, read_all):
    keyed = read_all(open_source("sqlite", str(db), {"table": "keyed"}))
    assert keyed.to_pylist() == [{"_rowid": "0", "k": "a", "v": 1}, {"_rowid": "1", "k": "b", "v": 2}]
    view = read_all(open_source("sqlite", str(db), {"table": "good"}))
    assert view.column("id").to_pylist() == [6, 7, 8, 9, 10]


def test_invalid_utf8_text(tmp_path, read_all):
    path = tmp_path / "bad.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE t (s TEXT)")
        connection.execute("INSERT INTO t VALUES (CAST(X'6361666500' AS TEXT)), ('ok'), (CAST(X'ff' AS TEXT))")
        connection.execute("UPDATE t SET s = CAST(X'636166E9' AS TEXT) WHERE rowid = 1")
    connection.close()
    source = open_source("sqlite", str(path), {"table": "t"})
    with capture_logs() as logs:
        table = read_all(source)
    assert table.column("s").to_pylist() == ["caf\ufffd", "ok", "\ufffd"]
    assert source.invalid_utf8_count() == 2
    assert [(e["path"], e["count"]) for e in logs if e["event"] == "source_invalid_utf8"] == [(str(path), 2)]


def test_mixed_values_coerce_or_explain(tmp_path, read_all):
    path = tmp_path / "mixed.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE t (n INTEGER, s TEXT)")
        connection.executemany("INSERT INTO t VALUES (?, ?)", [(1, "a"), (2.0, 5), ("x", None)])
    connection.close()
    source = open_source("sqlite", str(path), {"table": "t"})
    with pytest.raises(SourceError, match="CAST"):
        read_all(source)
    assert read_all(source, ["s"]).column("s").to_pylist() == ["a", "5", None]


def test_missing_table_suggests(db):
    with pytest.raises(SourceError, match="did you mean 'reviews'"):
        open_source("sqlite", str(db), {"table": "review"})


def test_empty_table(db):
    with pytest.raises(SourceError, match="empty"):
        open_source("sqlite", str(db), {"table": "empty"})


def test_table_or_query_required(db):
    with pytest.raises(SourceError, match="exactly one"):
        open_source("sqlite", str(db), {})
    with pytest.raises(SourceError, match="exactly one"):
        open_source("sqlite", str(db), {"table": "reviews", "query": "SELECT 1"})


def test_not_a_database(tmp_path):
    path = tmp_path / "x.db"
    path.write_text("hello, not sqlite" * 100)
    with pytest.raises(SourceError, match=r"x\.db"):
        open_source("sqlite", str(path), {"table": "t"})


def test_rowid_column_is_rejected(tmp_path):
    path = tmp_path / "r.db"
    with sqlite3.connect(path) as connection:
        connection.execute('CREATE TABLE t ("_rowid" INTEGER)')
        connection.execute("INSERT INTO t VALUES (1)")
    connection.close()
    with pytest.raises(SourceError, match="_rowid"):
        open_source("sqlite", str(path), {"table": "t"})
