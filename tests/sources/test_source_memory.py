from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from semray.errors import SourceError
from semray.sources import open_source, register_table


def test_registered_table(read_all):
    ref = register_table(pa.table({"a": [1, 2, None], "b": ["x", "ÿ", None]}))
    source = open_source("memory", None, {"ref": ref})
    assert source.estimated_rows() == 3
    table = read_all(source, ["b"], 2)
    assert table.to_pylist() == [{"_rowid": "0", "b": "x"}, {"_rowid": "1", "b": "ÿ"}, {"_rowid": "2", "b": None}]


def test_pandas_via_arrow(read_all):
    frame = pd.DataFrame({"n": [3, 4]}, index=[10, 20])
    ref = register_table(pa.Table.from_pandas(frame, preserve_index=False), "frame")
    assert ref == "frame"
    assert read_all(open_source("memory", None, {"ref": "frame"})).column_names == ["_rowid", "n"]


@pytest.mark.parametrize(("batch_rows", "task_rows"), [(1, 1), (3, 4), (50, 1000)])
def test_rowids_independent_of_tasks(rowids, batch_rows, task_rows):
    ref = register_table(pa.table({"v": list(range(10))}))
    source = open_source("memory", None, {"ref": ref, "task_rows": task_rows})
    assert len(source.read_tasks(None, batch_rows)) == -(-10 // task_rows)
    assert rowids(source, batch_rows) == [str(i) for i in range(10)]


def test_unknown_ref_suggests():
    register_table(pa.table({"v": [1]}), "reviews_table")
    with pytest.raises(SourceError, match="did you mean 'reviews_table'"):
        open_source("memory", None, {"ref": "reviews_tabel"})


def test_errors():
    with pytest.raises(SourceError, match="ref"):
        open_source("memory", None, {})
    with pytest.raises(SourceError, match="empty"):
        open_source("memory", None, {"ref": register_table(pa.table({"v": pa.array([], pa.int64())}))})
    with pytest.raises(SourceError, match="_rowid"):
        open_source("memory", None, {"ref": register_table(pa.table({"_rowid": [1]}))})
    with pytest.raises(SourceError, match="from_pandas"):
        register_table(pd.DataFrame({"a": [1]}))  # type: ignore[arg-type]


def test_same_name_never_replaces_another_table(read_all):
    first = register_table(pa.table({"v": [1]}), "dup")
    second = register_table(pa.table({"v": [2]}), "dup")
    assert first != second
    assert read_all(open_source("memory", None, {"ref": first})).column("v").to_pylist() == [1]
    assert read_all(open_source("memory", None, {"ref": second})).column("v").to_pylist() == [2]


def test_unregister():
    from semray.sources import unregister_table

    ref = register_table(pa.table({"v": [1]}))
    unregister_table(ref)
    with pytest.raises(SourceError, match="no in-memory table"):
        open_source("memory", None, {"ref": ref})
