from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from semray.errors import SourceError
from semray.sources import open_source


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "b").mkdir(parents=True)
    (root / "a.txt").write_text("alpha ☃", encoding="utf-8")
    (root / "b" / "c.md").write_text("gamma", encoding="utf-8")
    (root / "b" / "d.txt").write_bytes(b"bad \xff bytes")
    (root / "empty.txt").write_bytes(b"")
    (root / ".hidden").write_text("skip me")
    return root


def test_bad_utf8_fails_by_default_naming_file_and_offset(docs, read_all):
    source = open_source("text", str(docs), {})
    with pytest.raises(SourceError, match=r"d\.txt' is not valid utf-8: byte 0xff at byte offset 4 \(line 1\)"):
        read_all(source)
    assert source.invalid_utf8_count() == 0


def test_one_row_per_file(docs, read_all):
    source = open_source("text", str(docs), {"encoding_errors": "replace"})
    assert source.schema() == pa.schema([("path", pa.string()), ("text", pa.string())])
    assert source.estimated_rows() == 4
    with capture_logs() as logs:
        table = read_all(source)
    assert table.to_pylist() == [
        {"_rowid": "a.txt", "path": "a.txt", "text": "alpha ☃"},
        {"_rowid": "b/c.md", "path": "b/c.md", "text": "gamma"},
        {"_rowid": "b/d.txt", "path": "b/d.txt", "text": "bad \ufffd bytes"},
        {"_rowid": "empty.txt", "path": "empty.txt", "text": ""},
    ]
    assert [(e["path"], e["count"]) for e in logs if e["event"] == "source_invalid_utf8"] == [
        (str(docs / "b" / "d.txt"), 1)
    ]
    assert source.invalid_utf8_count() == 1


@pytest.mark.parametrize(("batch_rows", "files_per_task"), [(1, 1), (2, 3), (10, 1024)])
def test_rowids_independent_of_tasks(docs, rowids, batch_rows, files_per_task):
    source = open_source("text", str(docs), {"files_per_task": files_per_task, "encoding_errors": "replace"})
    assert len(source.read_tasks(None, batch_rows)) == -(-4 // files_per_task)
    assert rowids(source, batch_rows) == ["a.txt", "b/c.md", "b/d.txt", "empty.txt"]


def test_glob_option(docs, read_all):
    table = read_all(open_source("text", str(docs), {"glob": "**/*.txt", "encoding_errors": "replace"}))
    assert table.column("path").to_pylist() == ["a.txt", "b/d.txt", "empty.txt"]


def test_path_only_does_not_open_files(docs, read_all, monkeypatch):
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail(f"read {self}"))
    table = read_all(open_source("text", str(docs), {}), ["path"], 3)
    assert table.column_names == ["_rowid", "path"]
    assert read_all(open_source("text", str(docs), {}), [], 3).num_rows == 4


def test_empty_folder(tmp_path):
    (tmp_path / "nothing").mkdir()
    with pytest.raises(SourceError, match="has no"):
        open_source("text", str(tmp_path / "nothing"), {})


def test_single_file(tmp_path, read_all):
    path = tmp_path / "one.txt"
    path.write_text("x")
    assert read_all(open_source("text", str(path), {})).to_pylist() == [
        {"_rowid": "one.txt", "path": "one.txt", "text": "x"}
    ]
