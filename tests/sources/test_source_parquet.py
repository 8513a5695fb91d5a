from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from semray.errors import SourceError
from semray.sources import open_source


def write(table: pa.Table, path: Path, row_group_size: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "events"
    write(pa.table({"id": list(range(10)), "text": [f"é{i}" for i in range(10)]}), root / "part-0.parquet", 3)
    # A later file adds a column and widens nothing; it lacks nothing the reader cannot fill.
    write(pa.table({"id": [10, 11], "text": [None, "x"], "score": [0.5, None]}), root / "sub" / "part-1.parquet")
    write(pa.table({"id": pa.array([], pa.int64()), "text": pa.array([], pa.string())}), root / "part-2.parquet")
    (root / "_SUCCESS").write_bytes(b"")
    return root


def test_single_file(tmp_path, read_all):
    path = write(pa.table({"a": [1, None, 3], "b": ["x", "ü", None]}), tmp_path / "t.parquet", 2)
    source = open_source("parquet", str(path), {})
    assert source.estimated_rows() == 3
    table = read_all(source)
    assert table.column("_rowid").to_pylist() == ["0", "1", "2"]
    assert table.column("b").to_pylist() == ["x", "ü", None]
    assert source.invalid_utf8_count() == 0


def test_folder_unifies_and_prefixes(folder, read_all):
    source = open_source("parquet", str(folder), {})
    assert source.schema().names == ["id", "text", "score"]
    assert source.estimated_rows() == 12
    table = read_all(source)
    assert table.column("_rowid").to_pylist() == [f"part-0.parquet:{i}" for i in range(10)] + [
        "sub/part-1.parquet:0",
        "sub/part-1.parquet:1",
    ]
    assert table.column("score").to_pylist() == [None] * 10 + [0.5, None]


@pytest.mark.parametrize(("batch_rows", "task_rows"), [(1, 1), (2, 3), (4, 100), (1000, 1 << 20)])
def test_rowids_independent_of_tasks(folder, rowids, read_all, batch_rows, task_rows):
    expected = read_all(open_source("parquet", str(folder), {}), None, 5)
    source = open_source("parquet", str(folder), {"task_rows": task_rows})
    assert rowids(source, batch_rows) == expected.column("_rowid").to_pylist()


def test_one_task_per_row_group(folder):
    source = open_source("parquet", str(folder), {"task_rows": 1})
    tasks = source.read_tasks(None, 100)
    # 4 row groups of part-0 (3+3+3+1), 1 of part-1, none for the empty file.
    assert [task.estimated_rows for task in tasks] == [3, 3, 3, 1, 2]
    assert sum(task.estimated_rows for task in open_source("parquet", str(folder), {}).read_tasks(None, 100)) == 12


def test_columns_subset(folder, read_all):
    source = open_source("parquet", str(folder), {})
    table = read_all(source, ["score"], 4)
    assert table.column_names == ["_rowid", "score"]
    assert read_all(source, [], 4).column_names == ["_rowid"]
    assert read_all(source, [], 4).num_rows == 12


def test_reads_only_requested_columns(tmp_path, monkeypatch):
    path = write(pa.table({"a": [1], "b": [2]}), tmp_path / "t.parquet")
    seen = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("columns"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    for task in open_source("parquet", str(path), {}).read_tasks(["b"], 10):
        list(task())
    assert seen == [["b"]]


def test_glob(folder, read_all):
    table = read_all(open_source("parquet", str(folder / "**" / "*.parquet"), {}))
    assert table.column("_rowid").to_pylist()[-1] == "sub/part-1.parquet:1"


def test_empty_file(tmp_path):
    path = write(pa.table({"a": pa.array([], pa.int64())}), tmp_path / "e.parquet")
    with pytest.raises(SourceError, match="empty"):
        open_source("parquet", str(path), {})


def test_not_parquet(tmp_path):
    path = tmp_path / "x.parquet"
    path.write_text("hello")
    with pytest.raises(SourceError, match="not a readable parquet file"):
        open_source("parquet", str(path), {})


def test_incompatible_schemas(tmp_path):
    write(pa.table({"a": [1]}), tmp_path / "d" / "1.parquet")
    write(pa.table({"a": ["x"]}), tmp_path / "d" / "2.parquet")
    with pytest.raises(SourceError, match="incompatible"):
        open_source("parquet", str(tmp_path / "d"), {})


def test_rowid_column_is_rejected(tmp_path):
    path = write(pa.table({"_rowid": [1]}), tmp_path / "r.parquet")
    with pytest.raises(SourceError, match="_rowid"):
        open_source("parquet", str(path), {})
