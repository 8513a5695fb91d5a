"""The one cardinality API: row bounds from source metadata, defaults, statistics-backed rows."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from plans import PROFILES

from semray.cost_model import cardinality
from semray.cost_model.cardinality import (
    UNMEASURED_SELECTIVITY,
    UNMEASURED_SOURCE_ROWS,
    default_rows,
    plan_rows,
    row_bound,
)
from semray.cost_model.estimates import EstimateError, Interval
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.prices import TierProfile
from semray.cost_model.statistics import PlanStatistics
from semray.operators import (
    Aggregate,
    Distinct,
    Filter,
    Join,
    Limit,
    NamedExpr,
    Node,
    Project,
    Scan,
    Schema,
    SemAgg,
    SemClassify,
    SemFilter,
    SemJoin,
    SemMap,
    SemSearch,
    SemTopK,
    SourceSpec,
    Union,
)
from semray.operators.keys import source_key, statistics_key


def parquet_scan(folder: Path, name: str, rows: int) -> Scan:
    path = folder / f"{name}.parquet"
    pq.write_table(pa.table({f"{name}_id": list(range(rows)), f"{name}_text": ["x"] * rows}), path)
    return Scan(
        source=SourceSpec(kind="parquet", path=str(path)), source_schema=Schema.from_arrow(pq.read_schema(path))
    )


def memory_scan(name: str) -> Scan:
    schema = Schema.of((f"{name}_id", "BIGINT"), (f"{name}_text", "VARCHAR"))
    return Scan(source=SourceSpec(kind="memory", options={"name": name}), source_schema=schema)


def test_row_bound_reads_the_sources_metadata(tmp_path: Path) -> None:
    small, large = parquet_scan(tmp_path, "a", 12), parquet_scan(tmp_path, "b", 500)
    assert row_bound(small) == 12
    assert row_bound(Filter(input=large, predicate="b_id > 3")) == 500  # a filter only drops rows
    assert row_bound(Limit(input=large, count=5, offset=3)) == 8
    assert row_bound(Limit(input=small, count=50)) == 12
    assert row_bound(Join(left=small, right=large, on="l.a_id = r.b_id")) == 500
    assert row_bound(SemJoin(left=large, right=small, instruction="{l.b_text} is {r.a_text}")) == 500
    two = (
        Project(input=small, exprs=(NamedExpr(name="x", expr="a_id"),)),
        Project(input=large, exprs=(NamedExpr(name="x", expr="b_id"),)),
    )
    assert row_bound(Union(inputs=two)) == 512


def test_row_bound_is_none_when_a_source_cannot_tell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    known, unknown = parquet_scan(tmp_path, "a", 12), parquet_scan(tmp_path, "b", 5)
    stated = cardinality._source_rows
    monkeypatch.setattr(cardinality, "_source_rows", lambda spec: None if spec == unknown.source else stated(spec))
    assert row_bound(known) == 12
    assert row_bound(Join(left=known, right=unknown, on="l.a_id = r.b_id")) is None
    assert row_bound(Limit(input=unknown, count=3)) is None


A, B = memory_scan("a"), memory_scan("b")
KEPT = Filter(input=A, predicate="a_id > 1")
SOURCE = UNMEASURED_SOURCE_ROWS.value
DEFAULTS: list[tuple[Node, float]] = [
    (A, SOURCE),
    (KEPT, SOURCE / 3),
    (SemFilter(input=A, instruction="{a_text} is good"), SOURCE * UNMEASURED_SELECTIVITY.value),
    (SemFilter(input=A, instruction="{a_text} is good", diagnostics=True), SOURCE),  # keeps every row, flagged
    (SemMap(input=KEPT, instruction="sum {a_text}", output="s"), SOURCE / 3),
    (SemClassify(input=A, instruction="{a_text}", labels=("x", "y"), output="label"), SOURCE),
    (Join(left=KEPT, right=B, on="l.a_id = r.b_id"), SOURCE),
    (Join(left=A, right=B, on="l.a_id = r.b_id", kind="semi"), SOURCE / 2),
    (SemJoin(left=KEPT, right=B, instruction="{l.a_text} is {r.b_text}", implementation="nested"), SOURCE**2 / 30),
    # auto over 3,333 x 10,000 pairs runs blocked: 0.1 of the 400 candidates it judges per left row.
    (SemJoin(left=KEPT, right=B, instruction="{l.a_text} is {r.b_text}"), SOURCE / 3 * 400 * 0.1),
    (Aggregate(input=A, keys=("a_id",), aggs=(NamedExpr(name="n", expr="count(*)"),)), math.sqrt(SOURCE)),
    (Aggregate(input=A, keys=(), aggs=(NamedExpr(name="n", expr="count(*)"),)), 1.0),
    (SemAgg(input=A, instruction="sum {a_text}", keys=("a_id",), output="s"), math.sqrt(SOURCE)),
    (SemTopK(input=A, instruction="best {a_text}", k=3), 3.0),
    (SemSearch(input=KEPT, column="a_text", query="q", k=5000), SOURCE / 3),
    (Limit(input=A, count=10), 10.0),
    (Limit(input=A, count=10, offset=int(SOURCE) - 4), 4.0),
    (Distinct(input=A), SOURCE),
]


@pytest.mark.parametrize(("node", "rows"), DEFAULTS, ids=[node.label()[:40] for node, _ in DEFAULTS])
def test_default_rows_follow_the_documented_defaults(node: Node, rows: float) -> None:
    assert default_rows(node) == pytest.approx(rows)


@pytest.mark.parametrize("node", [node for node, _ in DEFAULTS], ids=[node.label()[:40] for node, _ in DEFAULTS])
def test_default_rows_are_the_cost_models_rows_with_nothing_measured(node: Node) -> None:
    """One set of defaults: join ordering without a cost model counts what the cost model counts."""
    profiles = {**PROFILES, "embedding": TierProfile("embedding", 0.02, 0.0, 0.0, math.inf, 8)}
    assert default_rows(node) == pytest.approx(estimate_plan(node, PlanStatistics(), profiles).rows.value)


def test_the_cost_model_takes_measured_rows_first_and_notes_the_defaults() -> None:
    kept = SemFilter(input=A, instruction="{a_text} is good")
    unmeasured = estimate_plan(kept, PlanStatistics(), PROFILES)
    assert unmeasured.rows == UNMEASURED_SOURCE_ROWS * UNMEASURED_SELECTIVITY
    assert unmeasured.assumed[""][0] == "selectivity" and unmeasured.assumed["input"] == ("source_rows",)
    statistics = PlanStatistics(
        source_rows={source_key(A): Interval.exact(200)}, selectivity={statistics_key(kept): Interval(0.1, 0.05, 0.2)}
    )
    measured = estimate_plan(kept, statistics, PROFILES)
    assert measured.rows == Interval(20.0, 10.0, 40.0)
    assert "selectivity" not in measured.assumed.get("", ())


def test_plan_rows_reads_the_estimate_and_falls_back_to_the_defaults() -> None:
    plan = SemTopK(input=KEPT, instruction="best {a_text}", k=3)
    statistics = PlanStatistics(source_rows={source_key(A): Interval.exact(90)})
    rows = plan_rows(plan, estimate_plan(plan, statistics, PROFILES))
    assert rows(plan.input.input) == 90.0 and rows(plan.input) == pytest.approx(30.0) and rows(plan) == 3.0
    elsewhere = Filter(input=B, predicate="b_id > 1")  # not in the plan: the defaults
    assert rows(elsewhere) == pytest.approx(UNMEASURED_SOURCE_ROWS.value / 3)


def test_an_operator_without_a_rule_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cardinality, "ROW_RULES", {Scan: cardinality.ROW_RULES[Scan]})
    with pytest.raises(EstimateError, match=r"no row-count rule for Filter; add one to ROW_RULES"):
        default_rows(KEPT)
