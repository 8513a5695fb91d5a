"""Relational statistics from a uniform sample of a source: exact row counts, filter selectivities."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from semray.cost_model.estimates import Interval
from semray.cost_model.relational import SourceSample, filter_selectivity, measure_source_filters, sample_source
from semray.operators import Filter, Scan, Schema, SourceSpec
from semray.operators.keys import source_key, statistics_key


def _scan(path: Path, rows: int) -> Scan:
    path.write_text("x,label\n" + "".join(f"{i},{'a' if i % 4 == 0 else 'b'}\n" for i in range(rows)))
    return Scan(
        source=SourceSpec(kind="csv", path=str(path)), source_schema=Schema.of(("x", "BIGINT"), ("label", "VARCHAR"))
    )


def test_a_source_sample_counts_every_row_and_keeps_a_uniform_sample(tmp_path: Path) -> None:
    scan = _scan(tmp_path / "x.csv", 5000)
    sample = sample_source(scan, size=400, seed=1, batch_rows=700)
    assert sample.population == 5000 and sample.table.num_rows == 400
    values = np.array(sample.table.column("x").to_pylist())
    assert len(set(values.tolist())) == 400 and 1800 < values.mean() < 3200  # spread over the whole file
    assert "_rowid" in sample.table.column_names
    estimate = filter_selectivity(Filter(input=scan, predicate="label = 'a'"), sample)
    assert estimate.covers(0.25) and estimate.high - estimate.low < 0.1


def test_a_sample_of_every_row_measures_exactly(tmp_path: Path) -> None:
    scan = _scan(tmp_path / "x.csv", 100)
    sample = sample_source(scan, size=1000)
    assert sample.table.num_rows == 100
    estimate = filter_selectivity(Filter(input=scan, predicate="x < 10"), SourceSample(sample.table, 100))
    assert (estimate.low, estimate.value, estimate.high) == (0.1, 0.1, 0.1)


def test_a_measuring_run_measures_filters_over_sources_once_per_source(tmp_path: Path) -> None:
    scan = _scan(tmp_path / "x.csv", 3000)
    kind = Filter(input=scan, predicate="label = 'a'")
    small = Filter(input=kind, predicate="x < 1500")  # over a filter, not a source: not measured
    found = measure_source_filters(small, size=500, seed=2)
    assert found.source_rows == {source_key(scan): Interval.exact(3000)}
    assert list(found.selectivity) == [statistics_key(kind)]
    assert found.selectivity[statistics_key(kind)].low <= 0.25 <= found.selectivity[statistics_key(kind)].high
