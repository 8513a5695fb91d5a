"""Helpers of the SQL tests: memory scans, a DuckDB reference evaluator of relational plans,
and result comparison (multisets, or sequences under ORDER BY).

The reference evaluator runs each plan node as one DuckDB statement over its inputs'
materialized Arrow tables. It is independent of semray's Ray pipeline, so differential
tests of the SQL compiler run without a cluster: same SQL in DuckDB directly vs. compiled
plan evaluated node by node.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import duckdb
import pyarrow as pa

from semray.operators import (
    ROW_ID,
    Aggregate,
    Distinct,
    Filter,
    Join,
    Limit,
    Node,
    Project,
    Scan,
    Schema,
    SemClassify,
    SemFilter,
    SemMap,
    Sort,
    SourceSpec,
    Union,
)
from semray.operators.schema import quote


def memory_scan(name: str, table: pa.Table, **options: str | int) -> Scan:
    """A memory Scan naming ``name`` (the reference evaluator reads ``tables[name]``)."""
    spec = SourceSpec(kind="memory", options={"name": name, **options})
    return Scan(source=spec, source_schema=Schema.from_arrow(table.schema))


_DATABASE = duckdb.connect()
"""One in-memory database for every statement: opening one costs far more than a query here."""


def run_duckdb(sql: str, tables: Mapping[str, pa.Table]) -> pa.Table:
    """Run ``sql`` in DuckDB with each Arrow table registered under its name."""
    cursor = _DATABASE.cursor()
    try:
        for name, table in tables.items():
            cursor.register(name, table)
        return cursor.sql(sql).to_arrow_table()
    finally:
        for name in tables:
            cursor.unregister(name)
        cursor.close()


def evaluate(node: Node, tables: Mapping[str, pa.Table]) -> pa.Table:
    """Evaluate a relational plan with DuckDB, one node at a time (semantic nodes are not supported)."""
    handler = _HANDLERS.get(type(node))
    if handler is None:
        raise NotImplementedError(f"the reference evaluator has no rule for {type(node).__name__}")
    inputs = [evaluate(child, tables) for child in node.children]
    return handler(node, inputs, tables)


def evaluate_with_answers(node: Node, tables: Mapping[str, pa.Table], answers: Mapping[str, str]) -> pa.Table:
    """Evaluate a plan whose row-wise semantic nodes are answered from known labels.

    ``answers`` maps each instruction to a DuckDB expression over the semantic node's input
    (usually a label column of the table): a SemFilter keeps the rows where it is true, a
    SemMap or SemClassify adds it as its output column. The same query with each call
    replaced by that expression, run in DuckDB directly, must give the same rows.
    """
    inputs = [evaluate_with_answers(child, tables, answers) for child in node.children]
    if isinstance(node, SemFilter):
        return _run(f"SELECT * FROM input WHERE {answers[node.instruction]}", input=inputs[0])
    if isinstance(node, SemMap | SemClassify):
        kind = node.output_schema.type_of(node.output)
        answer = f"CAST({answers[node.instruction]} AS {kind}) AS {quote(node.output)}"
        return _run(f"SELECT *, {answer} FROM input", input=inputs[0])
    handler = _HANDLERS.get(type(node))
    if handler is None:
        raise NotImplementedError(f"the reference evaluator has no rule for {type(node).__name__}")
    return handler(node, inputs, tables)


def _run(sql: str, **inputs: pa.Table) -> pa.Table:
    return run_duckdb(sql, inputs)


def _scan(node: Scan, inputs: list[pa.Table], tables: Mapping[str, pa.Table]) -> pa.Table:
    table = tables[str(node.source.options["name"])]
    columns = ", ".join(quote(c.name) for c in node.output_schema.user_columns())
    select = f", {columns}" if columns else ""
    return _run(f"SELECT CAST(row_number() OVER () AS VARCHAR) AS {ROW_ID}{select} FROM source", source=table)


def _filter(node: Filter, inputs: list[pa.Table], tables: Mapping[str, pa.Table]) -> pa.Table:
    return _run(f"SELECT * FROM input WHERE {node.predicate}", input=inputs[0])


def _project(node: Project, inputs: list[pa.Table], tables: Mapping[str, pa.Table]) -> pa.Table:
    exprs = ", ".join(f"{item.expr} AS {quote(item.name)}" for item in node.exprs)
    return _run(f"SELECT {ROW_ID}, {exprs} FROM input", input=inputs[0])


def _aggregate(node: Aggregate, inputs: list[pa.Table], tables: Mapping[str, pa.Table]) -> pa.Table:
    keys = ", ".join(quote(key) for key in node.keys)
    items = [quote(key) for key in node.keys] + [f"{item.expr} AS {quote(item.name)}" for item in node.aggs]
    group = f" GROUP BY {keys}" if keys else ""
    return _run(
        f"SELECT CAST(min({ROW_ID}) AS VARCHAR) AS {ROW_ID}, {', '.join(items)} FROM input{group}", input=inputs[0]
    )


def _join(node: Join, inputs: list[pa.Table], tables: Mapping[str, pa.Table]) -> pa.Table:
    left = ", ".join(f"l.{quote(name)}" for name in node.left.output_schema.names)
    if node.kind in ("semi", "anti"):
        kind = "SEMI" if node.kind == "semi" else "ANTI"
        return _run(f"SELECT {left} FROM l {kind} JOIN r ON {node.on}", l=inputs[0], r=inputs[1])
    right = [f"r.{quote(old)} AS {quote(new)}" for old, new in node.right_names.items()]
    kind = "LEFT JOIN" if node.kind == "left" else "JOIN"
    return _run(f"SELECT {', '.join([left, *right])} FROM l {kind} r ON {node.on}", l=inputs[0], r=inputs[1])


def _sort(node: Sort, inputs: list[pa.Table], tables: Mapping[str, pa.Table]) -> pa.Table:
    keys = ", ".join(
        f"{quote(k.column)} {'DESC' if k.descending else 'ASC'} NULLS {'FIRST' if k.nulls_first else 'LAST'}"
        for k in node.keys
    )
    return _run(f"SELECT * FROM input ORDER BY {keys}", input=inputs[0])


def _limit(node: Limit, inputs: list[pa.Table], tables: Mapping[str, pa.Table]) -> pa.Table:
    return inputs[0].slice(node.offset, node.count)


def _distinct(node: Distinct, inputs: list[pa.Table], tables: Mapping[str, pa.Table]) -> pa.Table:
    columns = [quote(c.name) for c in node.output_schema.user_columns()]
    return _run(
        f"SELECT min({ROW_ID}) AS {ROW_ID}, {', '.join(columns)} FROM input GROUP BY ALL ORDER BY {ROW_ID}",
        input=inputs[0],
    )


def _union(node: Union, inputs: list[pa.Table], tables: Mapping[str, pa.Table]) -> pa.Table:
    target = node.output_schema.to_arrow()
    return pa.concat_tables([table.select(target.names).cast(target) for table in inputs])


_HANDLERS: dict[type[Node], Callable[[Any, list[pa.Table], Mapping[str, pa.Table]], pa.Table]] = {
    Scan: _scan,
    Filter: _filter,
    Project: _project,
    Aggregate: _aggregate,
    Join: _join,
    Sort: _sort,
    Limit: _limit,
    Distinct: _distinct,
    Union: _union,
}


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """User columns (``_rowid`` dropped) as normalized row tuples, comparable across engines."""
    columns = [table.column(i).to_pylist() for i, name in enumerate(table.column_names) if name != ROW_ID]
    return [tuple(_normalize(value) for value in row) for row in zip(*columns, strict=True)] if columns else []


def _normalize(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return round(value, 9) + 0.0
    if isinstance(value, list):
        return tuple(_normalize(item) for item in value)
    if isinstance(value, dict):
        return tuple(sorted((key, _normalize(item)) for key, item in value.items()))
    return value


def assert_same_rows(actual: pa.Table, expected: pa.Table, *, ordered: bool, context: str = "") -> None:
    """Same user columns count and rows; as sequences when ``ordered``, else as multisets."""
    got, want = rows(actual), rows(expected)
    width_got = len([n for n in actual.column_names if n != ROW_ID])
    assert width_got == expected.num_columns, f"{context}: {width_got} columns, DuckDB gives {expected.num_columns}"
    if ordered:
        assert got == want, f"{context}: rows differ (ordered)\n got: {got}\nwant: {want}"
    else:
        assert Counter(got) == Counter(want), (
            f"{context}: rows differ\n got: {sorted(got, key=repr)}\nwant: {sorted(want, key=repr)}"
        )
