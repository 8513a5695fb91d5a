"""Errors shared by every file reader: kind, path, permissions, empty folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from semray.errors import SourceError
from semray.sources import OPENERS, open_source
from semray.sources.rowids import numbered_ids, rebatch


def test_unknown_kind_suggests():
    with pytest.raises(SourceError, match="did you mean 'parquet'"):
        open_source("parquett", "x", {})


def test_kinds_match_the_plan_ir():
    from semray.operators import SourceSpec

    assert set(OPENERS) == set(SourceSpec.model_fields["kind"].annotation.__args__)


@pytest.mark.parametrize("kind", ["csv", "json", "parquet", "text", "sqlite", "duckdb"])
def test_missing_path_names_it_and_suggests(tmp_path, kind):
    (tmp_path / "reviews.data").write_text("x")
    with pytest.raises(SourceError, match=r"does not exist; did you mean .*reviews\.data"):
        open_source(kind, str(tmp_path / "reveiws.data"), {"table": "t"} if kind in ("sqlite", "duckdb") else {})


@pytest.mark.parametrize("kind", ["csv", "json", "parquet", "text"])
def test_folder_without_matching_files(tmp_path, kind):
    (tmp_path / "notes.bin").write_text("x") if kind != "text" else None
    empty = tmp_path / "empty"
    empty.mkdir()
    target = empty if kind == "text" else tmp_path
    with pytest.raises(SourceError, match=f"folder '{target}' has no"):
        open_source(kind, str(target), {})


def test_glob_without_matches(tmp_path):
    with pytest.raises(SourceError, match="no files match"):
        open_source("csv", str(tmp_path / "*.csv"), {})


def test_unreadable_file(tmp_path, monkeypatch):
    path = tmp_path / "locked.csv"
    path.write_text("a\n1\n")
    original = Path.open

    def deny(self, *args, **kwargs):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return original(self, *args, **kwargs)

    # Tests may run as root, where chmod 000 does not stop reads; simulate the OS refusing.
    monkeypatch.setattr(Path, "open", deny)
    with pytest.raises(SourceError, match="permission denied; check the file's permissions"):
        open_source("csv", str(path), {})


def test_database_source_needs_a_file(tmp_path):
    (tmp_path / "a.db").write_text("")
    with pytest.raises(SourceError, match="one database file"):
        open_source("sqlite", str(tmp_path), {"table": "t"})


def test_bad_option_values(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("a\n1\n")
    with pytest.raises(SourceError, match="infer_bytes"):
        open_source("csv", str(path), {"infer_bytes": "lots"})
    with pytest.raises(SourceError, match="batch_rows"):
        open_source("csv", str(path), {}).read_tasks(None, 0)


def test_rowid_helpers():
    assert numbered_ids(0, 3, "f.csv:").to_pylist() == ["f.csv:0", "f.csv:1", "f.csv:2"]
    import pyarrow as pa

    parts = [pa.table({"a": list(range(n))}) for n in (5, 0, 2, 9)]
    assert [t.num_rows for t in rebatch(parts, 4)] == [4, 4, 4, 4]


def test_every_reader_satisfies_the_protocol(tmp_path):
    import pyarrow as pa

    from semray.sources import Source, register_table

    path = tmp_path / "a.csv"
    path.write_text("a\n1\n")
    for source in (
        open_source("csv", str(path), {}),
        open_source("memory", None, {"ref": register_table(pa.table({"a": [1]}))}),
    ):
        assert isinstance(source, Source)
        assert source.kind in OPENERS
