"""Relational execution on a local Ray, checked against DuckDB on the same data."""

from __future__ import annotations

from collections import Counter
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import semray
from semray.errors import ExecutionError
from semray.settings import Settings

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    n = 1000
    reviews = pa.table(
        {
            "id": list(range(n)),
            "product": [None if i % 97 == 0 else f"p{i % 13}" for i in range(n)],
            "rating": [None if i % 31 == 0 else i % 5 + 1 for i in range(n)],
            "text": [f"review {i} ünïcode ✓" for i in range(n)],
        }
    )
    products = pa.table(
        {
            "product": [f"p{i}" for i in range(15)] + [None],
            "category": [f"c{i % 4}" for i in range(15)] + ["none"],
            "price": [float(i) * 1.5 for i in range(16)],
        }
    )
    return {"reviews": reviews, "products": products}


def duck(sql: str, tables: dict[str, pa.Table]) -> list[tuple[Any, ...]]:
    connection = duckdb.connect()
    for name, table in tables.items():
        connection.register(name, table)
    return [tuple(row) for row in connection.execute(sql).fetchall()]


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    user = table.drop_columns(["_rowid"]) if "_rowid" in table.column_names else table
    return [tuple(row.values()) for row in user.to_pylist()]


def same_multiset(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    def norm(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(round(v, 9) if isinstance(v, float) else v for v in row)

    return Counter(map(norm, a)) == Counter(map(norm, b))


def q(tables: dict[str, pa.Table], name: str, settings: Settings) -> semray.Query:
    return semray.from_arrow(tables[name], name=name, settings=settings)


def test_filter_project(tables: dict[str, pa.Table], ray_settings: Settings) -> None:
    result = (
        q(tables, "reviews", ray_settings)
        .filter("rating >= 4 AND product <> 'p3'")
        .select("id", up="upper(product)")
        .collect()
    )
    expected = duck("SELECT id, upper(product) FROM reviews WHERE rating >= 4 AND product <> 'p3'", tables)
    assert same_multiset(rows(result), expected)
    assert result.schema.names == ["id", "up"]


def test_sort_limit_offset_with_nulls(tables: dict[str, pa.Table], ray_settings: Settings) -> None:
    result = (
        q(tables, "reviews", ray_settings).sort("rating", "id", descending=[True, False]).limit(20, offset=25).collect()
    )
    expected = duck("SELECT * FROM reviews ORDER BY rating DESC NULLS LAST, id LIMIT 20 OFFSET 25", tables)
    assert rows(result) == expected
    nulls_first = q(tables, "reviews", ray_settings).sort("rating", "id", nulls_first=True).limit(40).collect()
    assert rows(nulls_first) == duck(
        "SELECT * FROM reviews ORDER BY rating NULLS FIRST, id NULLS FIRST LIMIT 40", tables
    )


@pytest.mark.parametrize(
    "how,sql",
    [
        ("inner", "SELECT r.*, p.product, p.category, p.price FROM reviews r JOIN products p ON r.product = p.product"),
        (
            "left",
            "SELECT r.*, p.product, p.category, p.price FROM reviews r LEFT JOIN products p ON r.product = p.product",
        ),
        ("semi", "SELECT r.* FROM reviews r SEMI JOIN products p ON r.product = p.product"),
        ("anti", "SELECT r.* FROM reviews r ANTI JOIN products p ON r.product = p.product"),
    ],
)
def test_joins_match_duckdb(tables: dict[str, pa.Table], ray_settings: Settings, how: str, sql: str) -> None:
    joined = q(tables, "reviews", ray_settings).join(
        q(tables, "products", ray_settings), "l.product = r.product", how=how
    )  # type: ignore[arg-type]
    result = joined.collect(row_ids=True)
    assert same_multiset(rows(result), duck(sql, tables))
    assert len(set(result.column("_rowid").to_pylist())) == result.num_rows


def test_join_with_residual(tables: dict[str, pa.Table], ray_settings: Settings) -> None:
    joined = q(tables, "reviews", ray_settings).join(
        q(tables, "products", ray_settings), "l.product = r.product AND l.rating > r.price / 10"
    )
    expected = duck(
        "SELECT r.*, p.* FROM reviews r JOIN products p ON r.product = p.product AND r.rating > p.price / 10", tables
    )
    assert same_multiset(rows(joined.collect()), expected)


def test_group_by_and_global_aggregate(tables: dict[str, pa.Table], ray_settings: Settings) -> None:
    grouped = q(tables, "reviews", ray_settings).aggregate(
        by="product", n="count(*)", avg="avg(rating)", d="count(DISTINCT rating)"
    )
    expected = duck(
        "SELECT product, count(*), avg(rating), count(DISTINCT rating) FROM reviews GROUP BY product", tables
    )
    assert same_multiset(rows(grouped.collect()), expected)
    total = q(tables, "reviews", ray_settings).aggregate(n="count(*)", s="sum(rating)").collect()
    assert rows(total) == duck("SELECT count(*), sum(rating) FROM reviews", tables)


def test_aggregate_of_empty_input(tables: dict[str, pa.Table], ray_settings: Settings) -> None:
    empty = q(tables, "reviews", ray_settings).filter("id < 0")
    assert rows(empty.aggregate(n="count(*)", s="sum(rating)").collect()) == [(0, None)]
    assert empty.aggregate(by="product", n="count(*)").collect().num_rows == 0


def test_distinct_and_union(tables: dict[str, pa.Table], ray_settings: Settings) -> None:
    reviews = q(tables, "reviews", ray_settings).select("product")
    assert same_multiset(rows(reviews.distinct().collect()), duck("SELECT DISTINCT product FROM reviews", tables))
    both = reviews.union(reviews).collect(row_ids=True)
    assert both.num_rows == 2000 and len(set(both.column("_rowid").to_pylist())) == 2000
    assert same_multiset(
        rows(reviews.union(reviews, distinct=True).collect()),
        duck("SELECT product FROM reviews UNION SELECT product FROM reviews", tables),
    )


def test_row_ids_are_stable_and_unique(tables: dict[str, pa.Table], ray_settings: Settings) -> None:
    query = q(tables, "reviews", ray_settings).filter("rating = 2")
    first, second = query.collect(row_ids=True), query.collect(row_ids=True)
    assert first.column("_rowid").to_pylist() == second.column("_rowid").to_pylist()
    assert len(set(first.column("_rowid").to_pylist())) == first.num_rows


def test_csv_round_trip_and_parquet_output(tmp_path: Any, ray_settings: Settings) -> None:
    (tmp_path / "t.csv").write_text("a,b\n1,x\n2,y\n3,\n", encoding="utf-8")
    query = semray.read_csv(tmp_path / "t.csv", settings=ray_settings).filter("a > 1")
    assert rows(query.collect()) == [(2, "y"), (3, None)]
    out = tmp_path / "out" / "r.parquet"
    assert query.write_parquet(out) == 2
    assert pa.parquet.read_table(out).num_rows == 2 if hasattr(pa, "parquet") else True
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".partial")]


def test_iter_batches_streams(tables: dict[str, pa.Table], ray_settings: Settings) -> None:
    batches = list(q(tables, "reviews", ray_settings).iter_batches(batch_rows=100))
    assert sum(b.num_rows for b in batches) == 1000 and max(b.num_rows for b in batches) <= 256
    assert {tuple(b.column_names) for b in batches} == {tuple(tables["reviews"].column_names)}


def test_results_hold_the_query_columns_and_row_ids_on_request(
    tables: dict[str, pa.Table], ray_settings: Settings
) -> None:
    query = q(tables, "reviews", ray_settings).filter("rating = 2").select("id", "product")
    assert query.collect().column_names == ["id", "product"]
    assert list(query.to_pandas().columns) == ["id", "product"]
    with_ids = query.collect(row_ids=True)
    assert with_ids.column_names == ["_rowid", "id", "product"]
    assert list(query.to_pandas(row_ids=True).columns) == ["_rowid", "id", "product"]
    assert query.execute().table.column_names == ["_rowid", "id", "product"]
    (batch,) = query.iter_batches(row_ids=True)
    assert batch.column("_rowid").to_pylist() == with_ids.column("_rowid").to_pylist()


def test_runtime_failure_is_an_execution_error(tables: dict[str, pa.Table], ray_settings: Settings) -> None:
    counted = ray_settings.model_copy(update={"count_rows": "on"})
    with pytest.raises(ExecutionError, match="pipeline failed"):
        q(tables, "reviews", counted).select(x="CAST(text AS INTEGER)").collect()
    assert not list((counted.state_path / "row_counts").glob("*")), "a failed run leaves no count file"


def test_explain_after_a_run_shows_the_rows_each_operator_passed_on(
    tables: dict[str, pa.Table], ray_settings: Settings
) -> None:
    reviews = q(tables, "reviews", ray_settings).filter("rating >= 4")
    products = q(tables, "products", ray_settings).filter("price > 3")
    query = reviews.join(products, "l.product = r.product").aggregate(by="category", n="count(*)").sort("category")
    counted = query.limit(3).with_settings(ray_settings.model_copy(update={"count_rows": "on"}))
    result = counted.execute()
    explained = counted.explain(result)
    # Each operator line of the tree is followed by its actual line.
    lines = [line.strip(" │├└─") for line in explained.split("Optimized plan")[1].splitlines()]
    actual = {
        lines[i].split("  rows ")[0]: int(lines[i + 1].removeprefix("actual: rows ").replace(",", ""))
        for i in range(len(lines) - 1)
        if lines[i + 1].startswith("actual: rows ")
    }
    joined = "FROM reviews r JOIN products p ON r.product = p.product WHERE r.rating >= 4 AND p.price > 3"
    assert actual == {
        "Scan memory:reviews": 1000,
        "Filter rating >= 4": duck("SELECT count(*) FROM reviews WHERE rating >= 4", tables)[0][0],
        "Scan memory:products": 16,
        "Filter price > 3": duck("SELECT count(*) FROM products WHERE price > 3", tables)[0][0],
        "Join inner on l.product = r.product": duck(f"SELECT count(*) {joined}", tables)[0][0],
        "Aggregate by ['category']: count(*) AS n": duck(f"SELECT count(DISTINCT category) {joined}", tables)[0][0],
        "Sort category": duck(f"SELECT count(DISTINCT category) {joined}", tables)[0][0],
        "Limit 3": 3,
    }, explained
    # By default a plan that calls no model is not counted (counting costs ~1 ms per batch and operator).
    plain = query.execute()
    assert plain.operator_rows == {} and "rows were not counted in this run" in query.explain(plain)
    uncounted = query.with_settings(ray_settings.model_copy(update={"count_rows": "off"})).execute()
    assert uncounted.operator_rows == {} and uncounted.table.num_rows == 4
