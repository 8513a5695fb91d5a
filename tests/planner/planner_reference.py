"""A test oracle for rule soundness: evaluates plans in pure Python + DuckDB, with every
semantic operator replaced by a deterministic function of (row, instruction).

Not a second engine: it exists so that the rewrite rules can be checked over many generated
plans without Ray. A "model" here answers from a hash of the instruction and the rendered
values of the columns it reads, the way the simulator tier answers from (row, task): any
rewrite that keeps each operator's template and the values it reads keeps its answers.

A SemSearch ranks its rows by `search_similarity`, a stand-in for the embedding tier's cosine
that reads only the query and the searched column. A SemCode runs its supplied function in the
engine's own sandbox (`semray.sandbox.SandboxWorker`, as ``pipeline/workers/code_batches.py`` does), so its
outputs are the engine's, typed as declared; one without code would need a model to write it and
is refused.

Row order is kept deterministic (inputs' order; joins by (left, right) order; sorts are
stable), so LIMIT without ORDER BY is reproducible here.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import math
import re
import string
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
    SemAgg,
    SemClassify,
    SemCode,
    SemExtract,
    SemFilter,
    SemJoin,
    SemMap,
    SemSearch,
    SemTopK,
    Sort,
    SourceSpec,
    Union,
)
from semray.operators.schema import quote
from semray.planner.rules.factorize_semantic_joins import shared_property
from semray.sandbox import Limits, SandboxWorker

Rows = list[dict[str, Any]]
_DATABASE = duckdb.connect(config={"threads": 1})


def memory_scan(name: str, table: pa.Table) -> Scan:
    """A memory Scan of ``tables[name]``."""
    return Scan(source=SourceSpec(kind="memory", options={"name": name}), source_schema=Schema.from_arrow(table.schema))


def digest(*parts: object) -> int:
    """A stable integer from any values (the oracle's "model")."""
    text = "\x1f".join(repr(part) for part in parts)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def render(template: str, row: Mapping[str, Any]) -> str:
    """The instruction with each ``{column}`` replaced by the row's value (``{l.x}`` reads ``l.x``)."""
    pieces = []
    for literal, field, _, _ in string.Formatter().parse(template):
        pieces.append(literal)
        if field is not None:
            pieces.append(repr(row[field]))
    return "".join(pieces)


def evaluate(node: Node, tables: Mapping[str, pa.Table]) -> Rows:
    """The rows of ``node`` as dicts, in the oracle's deterministic order."""
    handler = _HANDLERS[type(node)]
    inputs = [evaluate(child, tables) for child in node.children]
    return handler(node, inputs, tables)


def _sql(query: str, rows: Rows, schema: Schema, **extra: tuple[Rows, Schema]) -> Rows:
    cursor = _DATABASE.cursor()
    try:
        for name, (data, data_schema) in {"t": (rows, schema), **extra}.items():
            cursor.register(name, _arrow(data, data_schema))
        result = cursor.sql(query).to_arrow_table()
        return result.to_pylist()
    finally:
        cursor.close()


@functools.lru_cache(maxsize=1024)
def _arrow_schema(schema: Schema) -> pa.Schema:
    return schema.to_arrow()  # opens a DuckDB database: ~100 ms, so once per schema


def _arrow(rows: Rows, schema: Schema) -> pa.Table:
    arrow_schema = _arrow_schema(schema)
    return pa.Table.from_pylist([{name: row[name] for name in schema.names} for row in rows], schema=arrow_schema)


def _with_order(rows: Rows) -> Rows:
    return [{**row, "__o": position} for position, row in enumerate(rows)]


def _ordered_schema(schema: Schema) -> Schema:
    return Schema.of(*((c.name, c.type) for c in schema.columns), ("__o", "BIGINT"))


def _scan(node: Scan, inputs: list[Rows], tables: Mapping[str, pa.Table]) -> Rows:
    table = tables[str(node.source.options["name"])]
    names = [c.name for c in node.output_schema.user_columns()]
    return [{ROW_ID: str(i), **{n: row[n] for n in names}} for i, row in enumerate(table.to_pylist())]


def _filter(node: Filter, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    schema = _ordered_schema(node.input.output_schema)
    kept = _sql(f"SELECT __o FROM t WHERE ({node.predicate}) ORDER BY __o", _with_order(rows), schema)
    return [rows[item["__o"]] for item in kept]


def _project(node: Project, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    items = ", ".join(f"({item.expr}) AS {quote(item.name)}" for item in node.exprs)
    schema = _ordered_schema(node.input.output_schema)
    return [
        {key: value for key, value in row.items() if key != "__o"}
        for row in _sql(f"SELECT {ROW_ID}, {items}, __o FROM t ORDER BY __o", _with_order(rows), schema)
    ]


def _join(node: Join, inputs: list[Rows], tables: object) -> Rows:
    left, right = inputs
    renames = node.right_names
    lschema, rschema = _ordered_schema(node.left.output_schema), _ordered_schema(node.right.output_schema)
    kind = {"inner": "JOIN", "left": "LEFT JOIN", "semi": "SEMI JOIN", "anti": "ANTI JOIN"}[node.kind]
    left_cols = [f"l.{quote(c)}" for c in node.left.output_schema.names if c != ROW_ID]
    if node.kind in ("semi", "anti"):
        select = ", ".join([f"l.{ROW_ID}", *left_cols, "l.__o AS __o"])
        order = "__o"
    else:
        right_cols = [f"r.{quote(old)} AS {quote(new)}" for old, new in renames.items()]
        row_id = f"l.{ROW_ID} || '*' || coalesce(r.{ROW_ID}, '') AS {ROW_ID}"
        select = ", ".join([row_id, *left_cols, *right_cols, "l.__o AS __o", "r.__o AS __r"])
        order = "__o, __r NULLS LAST"
    query = f"SELECT {select} FROM l {kind} r ON ({node.on}) ORDER BY {order}"
    cursor = _DATABASE.cursor()
    try:
        cursor.register("l", _arrow(_with_order(left), lschema))
        cursor.register("r", _arrow(_with_order(right), rschema))
        rows = cursor.sql(query).to_arrow_table().to_pylist()
    finally:
        cursor.close()
    return [{k: v for k, v in row.items() if k not in ("__o", "__r")} for row in rows]


def _aggregate(node: Aggregate, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    keys = [quote(k) for k in node.keys]
    aggs = ", ".join(f"({item.expr}) AS {quote(item.name)}" for item in node.aggs)
    if keys:
        parts = ", ".join(f"coalesce(CAST({k} AS VARCHAR), '\\N')" for k in keys)
        row_id = f"'g:' || md5(concat_ws(chr(31), {parts}))"
        select = ", ".join([f"{row_id} AS {ROW_ID}", *keys] + ([aggs] if aggs else []))
        query = f"SELECT {select} FROM t GROUP BY {', '.join(keys)} ORDER BY {ROW_ID}"
    else:
        query = f"SELECT 'all' AS {ROW_ID}, {aggs} FROM t"
    return _sql(query, rows, node.input.output_schema)


def _union(node: Union, inputs: list[Rows], tables: object) -> Rows:
    return [row for rows in inputs for row in rows]


def _sort(node: Sort, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    order = ", ".join(
        f"{quote(k.column)} {'DESC' if k.descending else 'ASC'} NULLS {'FIRST' if k.nulls_first else 'LAST'}"
        for k in node.keys
    )
    schema = _ordered_schema(node.input.output_schema)
    kept = _sql(f"SELECT __o FROM t ORDER BY {order}, __o", _with_order(rows), schema)
    return [rows[item["__o"]] for item in kept]


def _limit(node: Limit, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    return rows[node.offset : node.offset + node.count]


def _distinct(node: Distinct, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    first: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = tuple(value for name, value in row.items() if name != ROW_ID)
        kept = first.get(key)
        if kept is None:
            first[key] = dict(row)
        elif row[ROW_ID] < kept[ROW_ID]:
            kept[ROW_ID] = row[ROW_ID]
    return list(first.values())


def _value(kind: str, seed: int, lo: float | None = None, hi: float | None = None) -> Any:
    if kind == "int":
        low, high = (int(lo), int(hi)) if lo is not None and hi is not None else (0, 9)
        return low + seed % (high - low + 1)
    if kind == "float":
        return round((seed % 1000) / 100.0, 2)
    if kind == "bool":
        return seed % 2 == 0
    return f"v{seed % 7}"


def _ask(
    kind: str, node: SemFilter | SemMap | SemExtract | SemClassify | SemTopK, row: Mapping[str, Any], *extra: object
) -> int:
    return digest(kind, node.instruction, *extra, render(node.instruction, row))


def _sem_filter(node: SemFilter, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    return [row for row in rows if _ask("filter", node, row) % 100 < 55]


def _sem_map(node: SemMap, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    return [
        {
            **row,
            node.output: _value(node.output_type, _ask("map", node, row), node.lo, node.hi),
        }
        for row in rows
    ]


def _sem_extract(node: SemExtract, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    out = []
    for row in rows:
        text = render(node.instruction, row)
        values = {
            f.name: _value(f.type, digest("extract", node.instruction, f.name, f.type, text)) for f in node.fields
        }
        out.append({**row, **values})
    return out


def _sem_classify(node: SemClassify, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    labels = node.labels
    return [
        {
            **row,
            node.output: labels[
                digest("classify", node.instruction, labels, render(node.instruction, row)) % len(labels)
            ],
        }
        for row in rows
    ]


def _sem_topk(node: SemTopK, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    scored = sorted(rows, key=lambda row: (-_ask("topk", node, row), row[ROW_ID]))
    return [{**row, node.output: rank} for rank, row in enumerate(scored[: node.k], start=1)]


def _sem_agg(node: SemAgg, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    groups: dict[tuple[Any, ...], list[str]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in node.keys), []).append(render(node.instruction, row))
    out = []
    for key, texts in sorted(groups.items(), key=lambda item: repr(item[0])):
        row_id = "g:" + str(digest(*key)) if node.keys else "all"
        answer = f"a{digest('agg', node.instruction, sorted(texts)) % 97}"
        out.append({ROW_ID: row_id, **dict(zip(node.keys, key, strict=True)), node.output: answer})
    return out


def search_similarity(query: str, text: object) -> float:
    """The oracle's SemSearch score: the cosine of the query's and the text's sets of lower-cased
    words, in [0, 1] (0 for a null cell), like an embedding's cosine a function of the two texts only.

    >>> search_similarity("late delivery", "delivery was late") > search_similarity("late delivery", "ok")
    True
    """
    if not isinstance(text, str):
        return 0.0
    asked, found = set(re.findall(r"\w+", query.lower())), set(re.findall(r"\w+", text.lower()))
    if not asked or not found:
        return 0.0
    return len(asked & found) / math.sqrt(len(asked) * len(found))


def _sem_search(node: SemSearch, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    scored = [(search_similarity(node.query, row[node.column]), row) for row in rows]
    scored.sort(key=lambda item: (-item[0], digest("search", node.query, item[1][node.column]), item[1][ROW_ID]))
    return [{**row, node.output: score} for score, row in scored[: node.k]]


@functools.lru_cache(maxsize=32)
def _sandbox(code: str, inputs: tuple[str, ...], outputs: tuple[tuple[str, str], ...], limits: Limits) -> SandboxWorker:
    worker = SandboxWorker(code, inputs, outputs, limits)
    atexit.register(worker.close)
    return worker


def _sem_code(node: SemCode, inputs: list[Rows], tables: object) -> Rows:
    (rows,) = inputs
    if node.code is None:
        raise ValueError(f"SemCode {node.instruction!r} has no code: the oracle runs supplied code only")
    if not rows:
        return []
    limits = Limits(node.limits.cpu_s, node.limits.memory_mb, node.limits.wall_s)
    worker = _sandbox(node.code, node.inputs, node.output_types(), limits)
    produced = worker.run(_arrow(rows, node.input.output_schema)).to_pylist()
    return [{**row, **values} for row, values in zip(rows, produced, strict=True)]


def sem_join_holds(instruction: str, pair: Mapping[str, Any]) -> bool:
    """The oracle's pairwise predicate: "same X" compares a per-side class, anything else hashes the pair."""
    prop = shared_property(instruction)
    if prop is None:
        return digest("join", instruction, render(instruction, pair)) % 10 < 3
    values = [value for name, value in pair.items()]
    left, right = values
    return digest("class", prop, left) % 3 == digest("class", prop, right) % 3


def _sem_join(node: SemJoin, inputs: list[Rows], tables: object) -> Rows:
    left, right = inputs
    right_names = [c.name for c in node.right.output_schema.user_columns()]
    out_names = [c.name for c in node.output_schema.columns[len(node.left.output_schema.columns) :]]
    fields = [field for _, field, _, _ in string.Formatter().parse(node.instruction) if field is not None]
    out = []
    for lrow in left:
        for rrow in right:
            pair = {field: (lrow if field.startswith("l.") else rrow)[field[2:]] for field in dict.fromkeys(fields)}
            if sem_join_holds(node.instruction, pair):
                row = {**lrow, ROW_ID: f"{lrow[ROW_ID]}*{rrow[ROW_ID]}"}
                row.update({new: rrow[old] for old, new in zip(right_names, out_names, strict=True)})
                out.append(row)
    return out


_HANDLERS: dict[type[Node], Callable[[Any, list[Rows], Any], Rows]] = {
    Scan: _scan,
    Filter: _filter,
    Project: _project,
    Join: _join,
    Aggregate: _aggregate,
    Union: _union,
    Sort: _sort,
    Limit: _limit,
    Distinct: _distinct,
    SemFilter: _sem_filter,
    SemMap: _sem_map,
    SemExtract: _sem_extract,
    SemClassify: _sem_classify,
    SemTopK: _sem_topk,
    SemAgg: _sem_agg,
    SemJoin: _sem_join,
    SemSearch: _sem_search,
    SemCode: _sem_code,
}


def model_calls(node: Node, tables: Mapping[str, pa.Table], *, factorized: bool = True) -> Counter[str]:
    """Model answers per operator kind: one per row (pair, for joins; one per side's row for a
    factorized join unless ``factorized=False``), and one per row and field for extractions."""
    calls: Counter[str] = Counter()
    for child in node.children:
        calls += model_calls(child, tables, factorized=factorized)
    if node.calls_llm:
        sizes = [len(evaluate(child, tables)) for child in node.children]
        if isinstance(node, SemJoin):
            calls[node.op] += sum(sizes) if factorized and node.implementation == "factorized" else sizes[0] * sizes[1]
        else:
            calls[node.op] += sizes[0] * len(getattr(node, "fields", (None,)))
    return calls


def as_multiset(rows: Rows) -> Counter[tuple[tuple[str, str], ...]]:
    return Counter(tuple(sorted((key, repr(value)) for key, value in row.items())) for row in rows)
