"""Shared helpers for the reader tests: read a whole source into one table."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence

import pyarrow as pa
import pytest

from semray.sources import Source

ReadAll = Callable[..., pa.Table]


def _read_all(source: Source, columns: Sequence[str] | None = None, batch_rows: int = 1024) -> pa.Table:
    """Run every task (after a pickle round trip, as Ray would) and check the batch contract."""
    tables = []
    for task in source.read_tasks(columns, batch_rows):
        task = pickle.loads(pickle.dumps(task))
        for table in task():
            assert table.column_names[0] == "_rowid"
            assert table.schema.field("_rowid").type == pa.string()
            assert 0 < table.num_rows <= batch_rows
            tables.append(table)
    return pa.concat_tables(tables)


@pytest.fixture
def read_all() -> ReadAll:
    return _read_all


@pytest.fixture
def rowids() -> Callable[[Source, int], list[str]]:
    def ids(source: Source, batch_rows: int) -> list[str]:
        return _read_all(source, None, batch_rows).column("_rowid").to_pylist()

    return ids
