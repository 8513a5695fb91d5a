from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from semray.errors import SourceError
from semray.sources import open_source

ROWS = [
    {"id": 1, "text": "café", "tags": ["a", "b"], "meta": {"score": 0.5}},
    {"id": 2, "text": None, "tags": [], "meta": {"score": None}},
    {"id": 3, "text": "日本語 😀", "extra": True},
]


def lines_file(path: Path, rows=ROWS) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n\n" for row in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["r.jsonl", "r.ndjson", "r.json"])
def test_object_per_line(tmp_path, read_all, name):
    source = open_source("json", str(lines_file(tmp_path / name)), {})
    assert source.schema().names == ["id", "text", "tags", "meta", "extra"]
    table = read_all(source, None, 2)
    assert table.column("_rowid").to_pylist() == ["0", "1", "2"]
    assert table.column("text").to_pylist() == ["café", None, "日本語 😀"]
    assert table.column("meta").to_pylist()[0] == {"score": 0.5}
    assert table.column("extra").to_pylist() == [None, None, True]


def test_array_file_matches_lines_file(tmp_path, read_all):
    array = tmp_path / "a.json"
    array.write_text(json.dumps(ROWS, ensure_ascii=False), encoding="utf-8")
    lines = lines_file(tmp_path / "l.jsonl")
    from_array = read_all(open_source("json", str(array), {}), None, 1)
    from_lines = read_all(open_source("json", str(lines), {}), None, 1)
    assert from_array.equals(from_lines)


@pytest.mark.parametrize("batch_rows", [1, 2, 5])
def test_rowids_stable_across_batches(tmp_path, rowids, batch_rows):
    rows = [{"n": i} for i in range(7)]
    source = open_source("json", str(lines_file(tmp_path / "n.jsonl", rows)), {})
    assert rowids(source, batch_rows) == [str(i) for i in range(7)]


def test_columns_subset_and_none(tmp_path, read_all):
    source = open_source("json", str(lines_file(tmp_path / "r.jsonl")), {})
    assert read_all(source, ["text", "id"]).column_names == ["_rowid", "id", "text"]
    only_ids = read_all(source, [], 2)
    assert only_ids.column_names == ["_rowid"] and only_ids.num_rows == 3


def test_types_widen_across_sample(tmp_path, read_all):
    path = tmp_path / "w.jsonl"
    path.write_text('{"v": 1}\n{"v": 2.5}\n{"v": null}\n')
    source = open_source("json", str(path), {})
    assert source.schema().field("v").type == pa.float64()
    assert read_all(source).column("v").to_pylist() == [1.0, 2.5, None]


def test_folder_of_files(tmp_path, read_all):
    folder = tmp_path / "d"
    folder.mkdir()
    lines_file(folder / "b.jsonl", [{"x": 1}])
    (folder / "a.json").write_text('[{"x": 2}, {"x": 3}]')
    table = read_all(open_source("json", str(folder), {}))
    assert table.column("_rowid").to_pylist() == ["a.json:0", "a.json:1", "b.jsonl:0"]
    assert table.column("x").to_pylist() == [2, 3, 1]


@pytest.mark.parametrize("kind", ["lines", "array"])
def test_invalid_utf8(tmp_path, read_all, kind):
    path = tmp_path / ("bad.jsonl" if kind == "lines" else "bad.json")
    records = [b'{"t": "caf\xe9"}', b'{"t": "ok"}', b'{"t": "\xff", "u": "\xfe"}']
    path.write_bytes(b"\n".join(records) if kind == "lines" else b"[" + b",".join(records) + b"]")
    with pytest.raises(SourceError, match=r"byte 0xe9 at byte offset \d+ \(line 1\).*encoding option"):
        open_source("json", str(path), {})
    source = open_source("json", str(path), {"encoding_errors": "replace"})
    with capture_logs() as logs:
        table = read_all(source)
    assert table.column("t").to_pylist() == ["caf\ufffd", "ok", "\ufffd"]
    assert source.invalid_utf8_count() == 2
    assert [(e["path"], e["count"]) for e in logs if e["event"] == "source_invalid_utf8"] == [(str(path), 2)]


@pytest.mark.parametrize("body", ["", "\n\n", "[]"])
def test_empty(tmp_path, body):
    path = tmp_path / "e.json"
    path.write_text(body)
    with pytest.raises(SourceError, match="empty"):
        open_source("json", str(path), {})


@pytest.mark.parametrize("body", ['{"a": 1', "[1, 2]", '{"a": 1}\nnot json\n'])
def test_malformed(tmp_path, body):
    path = tmp_path / "m.json"
    path.write_text(body)
    with pytest.raises(SourceError, match=str(path)):
        source = open_source("json", str(path), {})
        for task in source.read_tasks(None, 10):
            list(task())


def test_rowid_column_is_rejected(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"_rowid": 1}\n')
    with pytest.raises(SourceError, match="_rowid"):
        open_source("json", str(path), {})


def test_later_value_of_another_type_explains(tmp_path):
    path = tmp_path / "drift.jsonl"
    path.write_text("".join(f'{{"n": {i}}}\n' for i in range(50)) + '{"n": {"nested": 1}}\n')
    source = open_source("json", str(path), {"infer_rows": 10})
    with pytest.raises(SourceError, match="infer_rows"):
        for task in source.read_tasks(None, 100):
            list(task())
