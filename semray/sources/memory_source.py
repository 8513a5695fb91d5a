"""In-memory Arrow tables, registered under a reference that a ``memory`` Scan names.

Pandas data frames are converted by the caller with
``pa.Table.from_pandas(df, preserve_index=False)``. Each read task carries its own
slice of the table, so tasks pickle to Ray workers without the registry.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from semray.errors import SourceError, suggest
from semray.sources.base import (
    Options,
    ReadTask,
    check_batch_rows,
    check_column_names,
    check_options,
    option_int,
    option_str,
    select_columns,
)
from semray.sources.rowids import numbered_ids, with_rowids

OPTIONS = frozenset({"ref", "name", "task_rows"})

_TABLES: dict[str, pa.Table] = {}
_LOCK = threading.Lock()


def register_table(table: pa.Table, name: str | None = None) -> str:
    """Keep ``table`` in this process and return the ref a ``memory`` source names.

    The ref is ``name`` unless another table is registered under it; always use the returned ref.

    >>> ref = register_table(pa.table({"a": [1]}), "demo")
    >>> ref
    'demo'
    """
    if not isinstance(table, pa.Table):
        raise SourceError(
            f"register_table needs a pyarrow.Table, got {type(table).__name__}; "
            "convert pandas with pa.Table.from_pandas(df, preserve_index=False)"
        )
    with _LOCK:
        ref = name or f"memory-{uuid.uuid4().hex[:12]}"
        # Another table already holds this name: keep it (a query may still read it) and use a fresh ref.
        if _TABLES.get(ref, table) is not table:
            ref = f"{ref}-{uuid.uuid4().hex[:8]}"
        _TABLES[ref] = table
    return ref


def unregister_table(ref: str) -> None:
    """Forget a registered table (memory sources otherwise live as long as the process)."""
    with _LOCK:
        _TABLES.pop(ref, None)


def registered_table(ref: str) -> pa.Table:
    with _LOCK:
        table = _TABLES.get(ref)
        known = list(_TABLES)
    if table is None:
        hint = suggest(ref, known)
        advice = f"did you mean {hint!r}?" if hint else "register it with register_table(table) first"
        raise SourceError(f"no in-memory table registered as {ref!r}; {advice}")
    return table


@dataclass(frozen=True, slots=True)
class MemorySliceRead:
    """Yield ``table`` (a slice starting at row ``first_row``) in ``batch_rows`` batches."""

    table: pa.Table
    first_row: int
    batch_rows: int

    def __call__(self) -> Iterator[pa.Table]:
        for start in range(0, self.table.num_rows, self.batch_rows):
            part = self.table.slice(start, self.batch_rows)
            yield with_rowids(part, numbered_ids(self.first_row + start, part.num_rows))


@dataclass(frozen=True)
class MemorySource:
    """A registered Arrow table, e.g. ``MemorySource.open(None, {"ref": register_table(t)})``."""

    ref: str
    table: pa.Table
    task_rows: int
    kind: str = "memory"

    @classmethod
    def open(cls, path: str | None, options: Options) -> MemorySource:
        check_options("memory", options, OPTIONS)
        ref = option_str(options, "ref")
        if not ref:
            raise SourceError("a memory source needs options['ref'], the value register_table returned")
        table = registered_table(ref)
        check_column_names(table.schema, f"in-memory table {ref!r}")
        if table.num_rows == 0:
            raise SourceError(f"in-memory table {ref!r} is empty (0 rows); give a table with at least one row")
        return cls(ref=ref, table=table, task_rows=option_int(options, "task_rows", 1 << 17))

    def schema(self) -> pa.Schema:
        return self.table.schema

    def estimated_rows(self) -> int | None:
        return int(self.table.num_rows)

    def read_tasks(self, columns: Sequence[str] | None, batch_rows: int) -> list[ReadTask]:
        check_batch_rows(batch_rows)
        names = select_columns(self.table.schema, columns, f"in-memory table {self.ref!r}")
        table = self.table.select(names)
        tasks = []
        for start in range(0, table.num_rows, self.task_rows):
            part = table.slice(start, self.task_rows)
            tasks.append(
                ReadTask(
                    read=MemorySliceRead(table=part, first_row=start, batch_rows=batch_rows),
                    estimated_rows=part.num_rows,
                    estimated_bytes=part.nbytes,
                )
            )
        return tasks

    def invalid_utf8_count(self) -> int:
        return 0
