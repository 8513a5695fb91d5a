"""Cases of the file-reader fault corpus: a ``Fault`` (files that must fail with a SourceError
naming the cause) or an ``Edge`` (files with a documented correct result), the helpers that
write them under ``tmp_path``, and the checks both test modules run. Readers are called as in
``tests/sources``: open, then run every read task after a pickle round trip. No Ray.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest

from semray.errors import SourceError
from semray.sources import Source, open_source
from semray.sources.base import OptionValue

Build = Callable[[Path], Path]


def read_all(source: Source, columns: Sequence[str] | None = None, batch_rows: int = 1000) -> pa.Table:
    """Every task's tables after a pickle round trip (as Ray runs them), batch contract checked."""
    tables = []
    for task in source.read_tasks(columns, batch_rows):
        for table in pickle.loads(pickle.dumps(task))():
            assert table.column_names[0] == "_rowid"
            assert 0 < table.num_rows <= batch_rows
            tables.append(table)
    return pa.concat_tables(tables)


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def folder(root: Path, files: dict[str, bytes]) -> Path:
    """A folder ``root / "d"`` holding ``files`` (relative name -> bytes)."""
    for name, data in files.items():
        write(root / "d" / name, data)
    return root / "d"


def lines(*rows: str) -> bytes:
    return "".join(row + "\n" for row in rows).encode()


def numbers(count: int, start: int = 0) -> list[str]:
    return [str(index) for index in range(start, start + count)]


@dataclass(frozen=True)
class Fault:
    """A file that must fail with a SourceError whose message matches every one of ``names``."""

    kind: str
    build: Build
    names: tuple[str, ...]
    """Regular expressions the message must contain: the cause, where it is, and the fix."""
    options: dict[str, OptionValue] = field(default_factory=dict)
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Edge:
    """A file with a documented correct result: exactly these columns holding exactly these values."""

    kind: str
    build: Build
    expected: dict[str, list[object]]
    options: dict[str, OptionValue] = field(default_factory=dict)
    batch_rows: int = 1000


def check_fault(fault: Fault, tmp_path: Path) -> None:
    """The fault's files fail to read with a SourceError matching every one of its patterns."""
    path = fault.build(tmp_path)
    with pytest.raises(SourceError) as caught:
        source = open_source(fault.kind, str(path), fault.options)
        read_all(source, fault.columns)
    message = str(caught.value)
    for pattern in fault.names:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"


def check_edge(edge: Edge, tmp_path: Path) -> None:
    """The edge's files read to exactly the expected columns and values, with stable row ids."""
    source = open_source(edge.kind, str(edge.build(tmp_path)), edge.options)
    table = read_all(source, None, edge.batch_rows)
    assert table.column_names[1:] == list(edge.expected)
    for column, values in edge.expected.items():
        assert table.column(column).to_pylist() == values, column
    ids = table.column("_rowid").to_pylist()
    if edge.kind == "text":
        assert ids == table.column("path").to_pylist()
    elif ":" in ids[0]:
        assert len(set(ids)) == len(ids)
    else:
        assert ids == [str(index) for index in range(table.num_rows)]
