"""Relational statistics from a uniform sample of a source's rows: row counts and selectivities.

`sample_source` reads a Scan's source through `semray.sources.open_source` and keeps a uniform
reservoir sample of its rows (Vitter's algorithm R, seeded) while counting every row, so the
row count is exact. `filter_selectivity` evaluates a Filter's SQL predicate on the sample with
DuckDB and returns the kept fraction with a finite-population-corrected Wilson interval.

>>> import pyarrow as pa
>>> from semray.operators import Filter, Scan, Schema, SourceSpec
>>> scan = Scan(source=SourceSpec(kind="csv", path="x.csv"), source_schema=Schema.of(("x", "BIGINT")))
>>> sample = SourceSample(pa.table({"x": list(range(100))}), population=100)
>>> filter_selectivity(Filter(input=scan, predicate="x < 25"), sample).value
0.25
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pyarrow as pa

from semray.cost_model.estimates import Interval
from semray.cost_model.sampling import Estimate, SamplingError, wilson_interval
from semray.cost_model.statistics import PlanStatistics
from semray.operators.base import Node, walk
from semray.operators.keys import source_key, statistics_key
from semray.operators.relational import Filter, Scan
from semray.operators.safe_sql import isolated_connection


@dataclass(frozen=True, slots=True, eq=False)
class SourceSample:
    """A uniform sample of a source's rows (with ``_rowid`` where the source gives it) and the row count."""

    table: pa.Table
    population: int

    @property
    def rows(self) -> Interval:
        return Interval.exact(self.population)


def sample_source(scan: Scan, size: int = 2000, seed: int = 0, batch_rows: int = 8192) -> SourceSample:
    """Read every row of ``scan``'s source once, keeping a uniform sample of ``size`` rows."""
    from semray.sources import open_source  # sources imports pyarrow readers; only needed here

    if size < 1:
        raise SamplingError(f"a source sample needs at least 1 row, got {size}")
    source = open_source(scan.source.kind, scan.source.path, scan.source.options)
    rng = np.random.default_rng(seed)
    kept: list[pa.Table] = []
    seen = 0
    for task in source.read_tasks(list(scan.columns) if scan.columns is not None else None, batch_rows):
        for batch in task():
            kept, seen = _reservoir(kept, batch, seen, size, rng)
    table = pa.concat_tables(kept) if kept else pa.table({})
    return SourceSample(table.slice(0, size) if table.num_rows > size else table, seen)


def _reservoir(
    kept: list[pa.Table], batch: pa.Table, seen: int, size: int, rng: np.random.Generator
) -> tuple[list[pa.Table], int]:
    """Algorithm R over one batch: row ``t`` (0-based overall) replaces a kept row with chance size/(t+1)."""
    current = pa.concat_tables(kept) if len(kept) > 1 else (kept[0] if kept else None)
    take = min(max(size - seen, 0), batch.num_rows)
    if take:
        head = batch.slice(0, take)
        current = head if current is None else pa.concat_tables([current, head])
    rest = batch.num_rows - take
    if rest and current is not None:
        positions = np.arange(seen + take, seen + batch.num_rows)
        slots = np.floor(rng.random(rest) * (positions + 1)).astype(np.int64)
        replace = slots < size
        if replace.any():
            indices = np.arange(current.num_rows)
            rows = {int(slot): take + int(i) for i, slot in zip(np.nonzero(replace)[0], slots[replace], strict=True)}
            chosen_from_batch = np.array(list(rows.values()), dtype=np.int64)
            keep_mask = np.ones(current.num_rows, dtype=bool)
            keep_mask[list(rows)] = False
            current = pa.concat_tables([current.take(indices[keep_mask]), batch.take(chosen_from_batch)])
    return ([current] if current is not None else []), seen + batch.num_rows


def filter_selectivity(node: Filter, sample: SourceSample, confidence: float = 0.95) -> Estimate:
    """The fraction of rows ``node``'s predicate keeps, measured on a uniform sample of its input.

    The sample must hold the columns the predicate reads (a sample of the Filter's input).
    """
    table = sample.table
    n = table.num_rows
    if n == 0:
        raise SamplingError("cannot measure a selectivity on an empty sample; sample more rows")
    connection = isolated_connection()
    connection.register("sample", table)
    ((kept,),) = connection.sql(f"SELECT count(*) FROM sample WHERE ({node.predicate})").fetchall()
    connection.close()
    proportion = float(kept) / n
    population = max(sample.population, n)
    fpc = (population - n) / max(population - 1, 1)
    n_effective = n / fpc if fpc > 0 else math.inf
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    low, high = wilson_interval(proportion, n_effective, z)
    return Estimate(proportion, low, high, confidence, n, "sample-wilson")


def measure_source_filters(plan: Node, size: int = 2000, seed: int = 0) -> PlanStatistics:
    """Exact row counts of the sources under relational filters, and each such filter's
    selectivity (with its interval) on a uniform sample of its source: one read per source.

    Only a `Filter` directly over a `Scan` is measured (the sample is of the source's rows);
    the others keep the cost model's defaults.
    """
    samples: dict[str, SourceSample] = {}
    rows: dict[str, Interval] = {}
    selectivity: dict[str, Interval] = {}
    for node in walk(plan):
        if not (isinstance(node, Filter) and isinstance(node.input, Scan)):
            continue
        key = source_key(node.input)
        if key not in samples:
            samples[key] = sample_source(node.input, size, seed)
        rows[key] = samples[key].rows
        selectivity[statistics_key(node)] = Interval.from_estimate(filter_selectivity(node, samples[key]))
    return PlanStatistics(source_rows=rows, selectivity=selectivity)
