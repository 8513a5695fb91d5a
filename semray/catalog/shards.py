"""One logical catalog table stored as several LanceDB tables (shards) of a bounded number of rows.

The catalog's ``segments`` grow with every document of every dataset, and LanceDB 0.40 builds an index
over a whole table at once: one table of every segment made each publish rebuild the vector and
full-text indexes of the whole catalog (adding ten documents to a catalog of a million re-indexed the
million), with a memory peak growing with the catalog. So ``segments`` is sharded: ``segments``,
``segments_1``, ``segments_2`` ... each of at most ``Settings.catalog_shard_rows`` rows, each with its own
indexes. A publish deletes a dataset's old rows from every shard (Lance marks them deleted; the
indexes stay valid), adds the new rows to the shards with room, in order, then to new shards, and
rebuilds only the indexes of the shards it added to, one shard at a time: its time and memory follow
the rows it adds, not the catalog's size.

A reader gets a ``Shards``: the shard tables at one catalog version. Searches ask every shard for its
best rows and merge them by score (``retrieval.rank_rows``); a full-text score (BM25) is computed over
its own shard's statistics, so scores of two shards are comparable only as far as their term
frequencies are alike.

>>> shard_name("segments", 0), shard_name("segments", 3), shard_number("segments", "segments_3")
('segments', 'segments_3', 3)
>>> shard_names(["datasets", "segments_2", "segments", "segments_10"], "segments")
['segments', 'segments_2', 'segments_10']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa


def shard_name(table: str, number: int) -> str:
    """The LanceDB table of shard ``number`` (shard 0 keeps the logical name: catalogs made before sharding
    hold their segments in it)."""
    return table if number == 0 else f"{table}_{number}"


def shard_number(table: str, name: str) -> int | None:
    """The shard number of the LanceDB table ``name`` of ``table``, or None when it is not one of its shards."""
    if name == table:
        return 0
    match = re.fullmatch(rf"{re.escape(table)}_(\d+)", name)
    return int(match.group(1)) if match else None


def shard_names(names: Iterable[str], table: str) -> list[str]:
    """The shards of ``table`` among ``names``, by shard number."""
    numbered = [(number, name) for name in names if (number := shard_number(table, name)) is not None]
    return [name for _, name in sorted(numbered)]


@dataclass(frozen=True, slots=True)
class Shards:
    """The shard tables of one logical table at one catalog version (read-only), in shard order."""

    name: str
    tables: tuple[Any, ...]

    @property
    def schema(self) -> pa.Schema:
        schema: pa.Schema = self.tables[0].schema
        return schema

    def count_rows(self, where: str | None = None) -> int:
        return sum(int(table.count_rows(where)) for table in self.tables)

    def query(
        self, where: str | None = None, columns: Sequence[str] | None = None, limit: int | None = None
    ) -> pa.Table:
        """The rows matching ``where`` (all without), ``columns`` of them, at most ``limit``, shard by shard."""
        parts: list[pa.Table] = []
        for table in self.tables:
            left = None if limit is None else limit - sum(part.num_rows for part in parts)
            if left is not None and left <= 0:
                break
            query = table.search().limit(left)
            if where is not None:
                query = query.where(where)
            if columns is not None:
                query = query.select(list(columns))
            parts.append(query.to_arrow())
        return pa.concat_tables(parts) if parts else pa.table({})


def tables_of(table: Any) -> tuple[Any, ...]:
    """The LanceDB tables to search for ``table``: a ``Shards``' shards, or the one table."""
    return table.tables if isinstance(table, Shards) else (table,)


class RowStream:
    """A stream of rows handed out in runs of at most a given count (one run per shard a publish fills)."""

    def __init__(self, rows: pa.Table | pa.RecordBatchReader) -> None:
        self.schema = rows.schema
        self._batches: Iterator[pa.RecordBatch] = iter(rows.to_batches() if isinstance(rows, pa.Table) else rows)
        self._held: pa.RecordBatch | None = None

    def has_rows(self) -> bool:
        """Whether a row is left (reads ahead to the next non-empty batch)."""
        while self._held is None or not self._held.num_rows:
            self._held = next(self._batches, None)
            if self._held is None:
                return False
        return True

    def take(self, count: int) -> pa.RecordBatchReader:
        """The next ``count`` rows (fewer at the end), as a stream read once."""

        def batches() -> Iterator[pa.RecordBatch]:
            left = count
            while left > 0 and self.has_rows():
                assert self._held is not None
                taken, self._held = self._held.slice(0, left), self._held.slice(left)
                left -= taken.num_rows
                yield taken

        return pa.RecordBatchReader.from_batches(self.schema, batches())
