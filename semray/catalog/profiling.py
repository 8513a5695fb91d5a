"""Profiles of tabular data: row count, per-column statistics and sample rows, streamed.

A profile reads its input once, batch by batch, whatever its size: row count, nulls, min/max
and the longest text are exact; distinct estimates, top values and text length percentiles come
from a sample of about ``stats_rows`` rows spread uniformly over the whole input (rows whose
hashed index has its low bits zero, one more bit whenever the sample would grow past twice the
limit), so a 1 GB CSV is profiled in bounded memory. Statistics are computed with DuckDB over Arrow
(``safe_sql.isolated_connection``). The distinct estimate of a sampled column is the GEE
estimator (Charikar et al. 2000): ``sqrt(n / r) * f1 + (values seen twice or more)``.

>>> import pyarrow as pa
>>> table = pa.table({"city": ["Oslo", "Rome", "Oslo", None]})
>>> profile = profile_batches(table.schema, [table])
>>> (profile.row_count, profile.columns[0].nulls, profile.columns[0].top_values[0])
(4, 1, ('Oslo', 2))
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from semray.operators.safe_sql import isolated_connection
from semray.sources import ROW_ID, Source

SAMPLE_ROWS = 5
"""Sample rows kept in a profile."""
STATS_ROWS = 100_000
"""At most this many rows (about; up to twice as many) feed distinct estimates, top values and percentiles."""
TOP_VALUES = 5
SAMPLE_TEXT_CHARS = 300
"""Longer cells are cut in sample rows (with an ellipsis): a sample shows what a column holds."""
READ_BATCH_ROWS = 16_384


@dataclass(frozen=True, slots=True)
class ColumnStats:
    """Statistics of one column (a row of the ``columns`` table)."""

    column: str
    type: str
    nulls: int
    distinct_estimate: int | None
    min: str | None
    max: str | None
    top_values: tuple[tuple[str, int], ...]
    length_p50: float | None
    length_p95: float | None
    length_max: int | None


@dataclass(frozen=True, slots=True)
class TableProfile:
    """What profiling one table found; ``stats_rows`` < ``row_count`` means the sampled statistics are estimates."""

    schema: tuple[tuple[str, str], ...]
    row_count: int
    stats_rows: int
    columns: tuple[ColumnStats, ...]
    samples: tuple[dict[str, Any], ...]

    def schema_json(self) -> str:
        return json.dumps([{"name": name, "type": kind} for name, kind in self.schema])

    def sample_json(self) -> str:
        return json.dumps(list(self.samples), ensure_ascii=False)


def duckdb_types(schema: pa.Schema) -> list[tuple[str, str]]:
    """Column names with DuckDB type names, as plan schemas write them (int64 -> BIGINT)."""
    relation = isolated_connection().from_arrow(pa.Table.from_batches([], schema=schema))
    return [(name, str(kind)) for name, kind in zip(relation.columns, relation.types, strict=True)]


def source_batches(source: Source, batch_rows: int = READ_BATCH_ROWS) -> Iterator[pa.Table]:
    """Every row of a source, streamed, without its ``_rowid``."""
    for task in source.read_tasks(None, batch_rows):
        for table in task():
            yield table.drop_columns([ROW_ID]) if ROW_ID in table.column_names else table


def profile_source(source: Source, *, stats_rows: int = STATS_ROWS) -> TableProfile:
    """Profile every row of an opened source (``semray.sources.open_source``)."""
    return profile_batches(source.schema(), source_batches(source), stats_rows=stats_rows)


def profile_batches(
    schema: pa.Schema, batches: Iterable[pa.Table | pa.RecordBatch], *, stats_rows: int = STATS_ROWS
) -> TableProfile:
    """Profile a stream of tables of ``schema``, reading each batch once."""
    scan = _Scan(schema, stats_rows)
    for batch in batches:
        scan.add(batch)
    sample = scan.sample()
    types = duckdb_types(schema)
    columns = tuple(
        _column_stats(sample, name, kind, scan, field) for (name, kind), field in zip(types, schema, strict=True)
    )
    return TableProfile(
        schema=tuple(types),
        row_count=scan.rows,
        stats_rows=sample.num_rows,
        columns=columns,
        samples=tuple(_json_row(row) for row in scan.first_rows.to_pylist()),
    )


class _Scan:
    """Exact counts over every batch, plus a systematic sample of about ``limit`` rows."""

    def __init__(self, schema: pa.Schema, limit: int) -> None:
        self.schema = schema
        self.limit = max(1, limit)
        self.rows = 0
        self.nulls = [0] * len(schema)
        self.minimum: list[Any] = [None] * len(schema)
        self.maximum: list[Any] = [None] * len(schema)
        self.longest: list[int | None] = [None] * len(schema)
        self.stride = 1
        self._parts: list[pa.Table] = []
        self._hashes: list[npt.NDArray[np.uint64]] = []
        self._kept = 0
        self.first_rows = pa.Table.from_batches([], schema=schema)

    def add(self, batch: pa.Table | pa.RecordBatch) -> None:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        batch = batch.select(self.schema.names).cast(self.schema) if batch.schema != self.schema else batch
        if self.first_rows.num_rows < SAMPLE_ROWS:
            self.first_rows = pa.concat_tables(
                [self.first_rows, batch.slice(0, SAMPLE_ROWS - self.first_rows.num_rows)]
            )
        for position, field in enumerate(self.schema):
            column = batch.column(position)
            self.nulls[position] += column.null_count
            if _orderable(field.type) and column.null_count < len(column):
                bounds = pc.min_max(column)
                low, high = bounds["min"].as_py(), bounds["max"].as_py()
                self.minimum[position] = low if self.minimum[position] is None else min(self.minimum[position], low)
                self.maximum[position] = high if self.maximum[position] is None else max(self.maximum[position], high)
            if _is_text(field.type) and column.null_count < len(column):
                longest = pc.max(pc.utf8_length(column)).as_py()
                self.longest[position] = max(self.longest[position] or 0, longest or 0)
        self._keep(batch)
        self.rows += batch.num_rows

    def _keep(self, batch: pa.Table) -> None:
        # A row is kept while the low bits of its index's hash are zero; doubling the stride keeps a
        # subset of the kept rows, so the sample stays uniform over the input whatever its order
        # (a plain every-k-th-row sample aliases with periodic data).
        hashes = _mix(np.arange(self.rows, self.rows + batch.num_rows, dtype=np.uint64))
        keep = (hashes & np.uint64(self.stride - 1)) == 0
        self._parts.append(batch.filter(pa.array(keep)))
        self._hashes.append(hashes[keep])
        self._kept += int(keep.sum())
        while self._kept > 2 * self.limit:
            self.stride *= 2
            mask = np.uint64(self.stride - 1)
            kept_parts, kept_hashes = [], []
            for part, part_hashes in zip(self._parts, self._hashes, strict=True):
                keep = (part_hashes & mask) == 0
                kept_parts.append(part.filter(pa.array(keep)))
                kept_hashes.append(part_hashes[keep])
            self._parts, self._hashes = kept_parts, kept_hashes
            self._kept = sum(part.num_rows for part in self._parts)

    def sample(self) -> pa.Table:
        if not self._parts:
            return pa.Table.from_batches([], schema=self.schema)
        return pa.concat_tables(self._parts).combine_chunks()


def _mix(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's finaliser: a well-spread 64-bit hash of each row index."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _column_stats(sample: pa.Table, name: str, kind: str, scan: _Scan, field: pa.Field) -> ColumnStats:
    position = scan.schema.get_field_index(field.name)
    connection = isolated_connection()
    connection.register("sample_table", sample.select([position]).rename_columns(["v"]))
    text = _is_text(field.type)
    distinct = top = lengths = None
    if _orderable(field.type):
        f1, repeated, seen = connection.execute(
            "SELECT count(*) FILTER (WHERE c = 1), count(*) FILTER (WHERE c > 1), count(*) "
            "FROM (SELECT count(*) AS c FROM sample_table WHERE v IS NOT NULL GROUP BY v)"
        ).fetchone() or (0, 0, 0)
        sampled = sample.num_rows - sample.column(0).null_count if sample.num_rows else 0
        non_null = scan.rows - scan.nulls[position]
        if sampled >= non_null:
            distinct = int(seen)
        elif repeated == 0:  # every sampled value is unique: most likely a key
            distinct = non_null
        else:
            distinct = min(non_null, round(math.sqrt(non_null / max(sampled, 1)) * f1 + repeated))
        # values that occur once are no "top" values (a key column has none)
        top = connection.execute(
            "SELECT CAST(v AS VARCHAR) AS value, count(*) AS n FROM sample_table WHERE v IS NOT NULL "
            f"GROUP BY v HAVING count(*) > 1 ORDER BY n DESC, value LIMIT {TOP_VALUES}"
        ).fetchall()
    if text and sample.num_rows:
        lengths = connection.execute(
            "SELECT quantile_cont(length(v), 0.5), quantile_cont(length(v), 0.95) FROM sample_table WHERE v IS NOT NULL"
        ).fetchone()
    connection.close()
    p50, p95 = lengths if lengths else (None, None)
    return ColumnStats(
        column=name,
        type=kind,
        nulls=scan.nulls[position],
        distinct_estimate=distinct,
        min=_render(scan.minimum[position]),
        max=_render(scan.maximum[position]),
        top_values=tuple((str(value), int(count)) for value, count in (top or ())),
        length_p50=float(p50) if p50 is not None else None,
        length_p95=float(p95) if p95 is not None else None,
        length_max=scan.longest[position] if text else None,
    )


def _is_text(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _orderable(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_decimal(kind)
        or pa.types.is_temporal(kind)
        or pa.types.is_boolean(kind)
        or _is_text(kind)
    )


def _render(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    text = str(value)
    return text if len(text) <= SAMPLE_TEXT_CHARS else text[:SAMPLE_TEXT_CHARS] + "…"


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    return {name: _json_value(value) for name, value in row.items()}


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return value if len(value) <= SAMPLE_TEXT_CHARS else value[:SAMPLE_TEXT_CHARS] + "…"
    if isinstance(value, list):
        return [_json_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _json_value(item) for key, item in value.items()}
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, decimal.Decimal):
        return str(value)
    return _render(value)
