"""Row ids and batch shaping shared by the readers.

Row ids are strings: ``"17"`` for the 18th row of a single-file or in-memory source,
``"part-0.parquet:17"`` when the source spans several files, a relative path for text
folders, and the table's rowid for sqlite/duckdb tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from semray.sources.base import ROW_ID


def numbered_ids(start: int, count: int, prefix: str = "") -> pa.Array:
    """Row ids ``prefix + str(n)`` for n in ``[start, start + count)``.

    >>> numbered_ids(3, 2, "a.csv:").to_pylist()
    ['a.csv:3', 'a.csv:4']
    """
    numbers = pa.array(np.arange(start, start + count, dtype=np.int64)).cast(pa.string())
    if not prefix:
        return numbers
    return pc.binary_join_element_wise(pa.scalar(prefix), numbers, "")


def file_prefix(relative_path: str | None) -> str:
    """The row-id prefix for rows of one file: ``"a/b.csv:"`` in a multi-file source, else ``""``."""
    return "" if relative_path is None else f"{relative_path}:"


def with_rowids(table: pa.Table, ids: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Put ``ids`` (cast to string) in front of ``table`` as ``_rowid``."""
    if ids.type != pa.string():
        ids = ids.cast(pa.string())
    field = pa.field(ROW_ID, pa.string(), nullable=False)
    if table.num_columns == 0:
        # A zero-column table may not know its row count; the ids decide it.
        return pa.Table.from_arrays([ids], schema=pa.schema([field]))
    return table.add_column(0, field, ids)


def rebatch(parts: Iterable[pa.Table | pa.RecordBatch], batch_rows: int) -> Iterator[pa.Table]:
    """Regroup a stream of tables into tables of exactly ``batch_rows`` rows (the last may be short).

    >>> [t.num_rows for t in rebatch([pa.table({"a": [1, 2, 3]})] * 3, 4)]
    [4, 4, 1]
    """
    pending: list[pa.Table] = []
    held = 0
    for part in parts:
        table = part if isinstance(part, pa.Table) else pa.Table.from_batches([part])
        if table.num_rows == 0:
            continue
        if table.num_columns == 0:
            # Arrow's concat loses the row count of zero-column tables; only counts matter here.
            table = _placeholder(table.num_rows)
        pending.append(table)
        held += table.num_rows
        while held >= batch_rows:
            merged = pa.concat_tables(pending) if len(pending) > 1 else pending[0]
            yield _strip_placeholder(merged.slice(0, batch_rows).combine_chunks())
            rest = merged.slice(batch_rows)
            pending = [rest] if rest.num_rows else []
            held = rest.num_rows
    if held:
        merged = pa.concat_tables(pending) if len(pending) > 1 else pending[0]
        yield _strip_placeholder(merged.combine_chunks())


_PLACEHOLDER = "__semray_rows__"


def _placeholder(rows: int) -> pa.Table:
    return pa.table({_PLACEHOLDER: pa.nulls(rows)})


def _strip_placeholder(table: pa.Table) -> pa.Table:
    if table.column_names == [_PLACEHOLDER]:
        return pa.Table.from_batches(
            [pa.RecordBatch.from_arrays([table.column(0).combine_chunks()], [_PLACEHOLDER]).select([])]
        )
    return table
