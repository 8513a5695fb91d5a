from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from semray.errors import SourceError
from semray.sources import open_source


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def reviews(tmp_path: Path) -> Path:
    body = 'id,review,rating\n1,great café,5\n2,,\n3,"line one\nline two",2.5\n4,ok,3\n5,naïve 😀,1\n'
    return write(tmp_path / "reviews.csv", body.encode())


def test_types_nulls_unicode(reviews, read_all):
    source = open_source("csv", str(reviews), {})
    assert source.schema() == pa.schema([("id", pa.int64()), ("review", pa.string()), ("rating", pa.float64())])
    table = read_all(source)
    assert table.column("_rowid").to_pylist() == ["0", "1", "2", "3", "4"]
    assert table.column("review").to_pylist() == ["great café", None, "line one\nline two", "ok", "naïve 😀"]
    assert table.column("rating").to_pylist() == [5.0, None, 2.5, 3.0, 1.0]
    assert source.invalid_utf8_count() == 0
    assert source.estimated_rows() is not None


@pytest.mark.parametrize("batch_rows", [1, 2, 3, 100])
def test_rowids_do_not_depend_on_batches(reviews, rowids, batch_rows):
    assert rowids(open_source("csv", str(reviews), {}), batch_rows) == ["0", "1", "2", "3", "4"]


def test_columns_subset_in_source_order(reviews, read_all):
    table = read_all(open_source("csv", str(reviews), {}), ["rating", "id"], 2)
    assert table.column_names == ["_rowid", "id", "rating"]
    assert table.column("id").to_pylist() == [1, 2, 3, 4, 5]


def test_no_columns_still_counts_rows(reviews, read_all):
    table = read_all(open_source("csv", str(reviews), {}), [], 2)
    assert table.column_names == ["_rowid"]
    assert table.num_rows == 5


def test_unknown_column_suggests(reviews):
    with pytest.raises(SourceError, match="did you mean 'rating'"):
        open_source("csv", str(reviews), {}).read_tasks(["ratng"], 10)


def test_types_fixed_by_inference_do_not_change_mid_file(tmp_path, read_all):
    # Small blocks force many batches; every batch must keep the inferred types.
    rows = "".join(f"{i},{i * 0.5},name{i}\n" for i in range(2000))
    path = write(tmp_path / "big.csv", ("a,b,c\n" + rows).encode())
    source = open_source("csv", str(path), {})
    table = read_all(source, None, 97)
    assert table.num_rows == 2000
    assert table.schema.field("a").type == pa.int64()
    assert table.column("_rowid").to_pylist() == [str(i) for i in range(2000)]


def test_invalid_utf8_fails_by_default_naming_offset_and_option(tmp_path):
    path = write(tmp_path / "bad.csv", b"id,text\n1,caf\xe9\n2,fine\n3,\xff\xfe\n")
    with pytest.raises(SourceError, match=r"byte 0xe9 at byte offset 13 \(line 2\).*encoding option"):
        open_source("csv", str(path), {})


def test_latin1_with_the_encoding_option(tmp_path, read_all):
    path = write(tmp_path / "latin.csv", "id,text\n1,café\n2,naïve\n".encode("latin-1"))
    table = read_all(open_source("csv", str(path), {"encoding": "latin-1"}))
    assert table.column("text").to_pylist() == ["café", "naïve"]


def test_invalid_utf8_is_replaced_counted_and_logged(tmp_path, read_all):
    path = write(tmp_path / "bad.csv", b"id,text\n1,caf\xe9\n2,fine\n3,\xff\xfe\n")
    source = open_source("csv", str(path), {"encoding_errors": "replace"})
    assert source.schema().field("text").type == pa.string()
    with capture_logs() as logs:
        table = read_all(source)
    assert table.column("text").to_pylist() == ["caf\ufffd", "fine", "\ufffd\ufffd"]
    assert source.invalid_utf8_count() == 2
    events = [entry for entry in logs if entry["event"] == "source_invalid_utf8"]
    assert events == [{"event": "source_invalid_utf8", "path": str(path), "count": 2, "log_level": "warning"}]


def test_invalid_utf8_after_the_inference_sample(tmp_path, read_all):
    rows = "".join(f"{i},word{i}\n" for i in range(3000)).encode()
    path = write(tmp_path / "late.csv", b"id,text\n" + rows + b"3000,bad\xff\n")
    source = open_source("csv", str(path), {"infer_bytes": 4096, "encoding_errors": "replace"})
    table = read_all(source, ["text"], 500)
    assert table.column("text").to_pylist()[-1] == "bad\ufffd"
    assert source.invalid_utf8_count() == 1


def test_folder_of_files_prefixes_rowids(tmp_path, read_all):
    write(tmp_path / "d" / "a.csv", b"x,y\n1,a\n2,b\n")
    write(tmp_path / "d" / "sub" / "b.csv", b"x,z\n3.5,c\n")
    write(tmp_path / "d" / "_SUCCESS", b"")
    source = open_source("csv", str(tmp_path / "d"), {})
    assert source.schema() == pa.schema([("x", pa.float64()), ("y", pa.string()), ("z", pa.string())])
    table = read_all(source)
    assert table.column("_rowid").to_pylist() == ["a.csv:0", "a.csv:1", "sub/b.csv:0"]
    assert table.column("z").to_pylist() == [None, None, "c"]
    assert len(source.read_tasks(None, 10)) == 2


def test_glob(tmp_path, read_all):
    write(tmp_path / "p1.csv", b"x\n1\n")
    write(tmp_path / "p2.csv", b"x\n2\n")
    write(tmp_path / "other.csv", b"x\n9\n")
    table = read_all(open_source("csv", str(tmp_path / "p*.csv"), {}))
    assert table.column("_rowid").to_pylist() == ["p1.csv:0", "p2.csv:0"]


def test_options_delimiter_and_headerless(tmp_path, read_all):
    path = write(tmp_path / "t.tsv", b"1\tx\n2\ty\n")
    table = read_all(open_source("csv", str(path), {"delimiter": "\t", "header": False}))
    assert table.column_names == ["_rowid", "f0", "f1"]
    assert table.column("f1").to_pylist() == ["x", "y"]


def test_gzip(tmp_path, read_all):
    path = write(tmp_path / "z.csv.gz", gzip.compress(b"a\n1\n2\n"))
    assert read_all(open_source("csv", str(path), {})).column("a").to_pylist() == [1, 2]


@pytest.mark.parametrize("body", [b"", b"a,b\n"])
def test_empty_file(tmp_path, body):
    path = write(tmp_path / "empty.csv", body)
    with pytest.raises(SourceError, match="empty"):
        open_source("csv", str(path), {})


def test_rowid_column_is_rejected(tmp_path):
    path = write(tmp_path / "r.csv", b"_rowid,a\n1,2\n")
    with pytest.raises(SourceError, match="_rowid"):
        open_source("csv", str(path), {})


def test_unknown_option(reviews):
    with pytest.raises(SourceError, match="did you mean 'delimiter'"):
        open_source("csv", str(reviews), {"delimeter": ";"})


def test_later_value_of_another_type_explains(tmp_path):
    rows = "".join(f"{i}\n" for i in range(5000))
    path = write(tmp_path / "drift.csv", ("n\n" + rows + "not a number\n").encode())
    source = open_source("csv", str(path), {"infer_bytes": 1024})
    with pytest.raises(SourceError, match="infer_bytes"):
        for task in source.read_tasks(None, 1000):
            list(task())


def test_reads_only_requested_columns(reviews, monkeypatch):
    import pyarrow.csv as pcsv

    seen = []
    original = pcsv.open_csv

    def spy(*args, **kwargs):
        if kwargs["convert_options"].column_types:  # not the probe that only reads the header
            seen.append(kwargs["convert_options"].include_columns)
        return original(*args, **kwargs)

    source = open_source("csv", str(reviews), {})
    monkeypatch.setattr(pcsv, "open_csv", spy)
    for task in source.read_tasks(["review"], 10):
        list(task())
    assert seen == [["review"]]


def test_tsv_defaults_to_tab(tmp_path, read_all):
    path = write(tmp_path / "t.tsv", b"a\tb\n1\tx,y\n")
    assert read_all(open_source("csv", str(path), {})).column("b").to_pylist() == ["x,y"]
