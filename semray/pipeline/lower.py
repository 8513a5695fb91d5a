"""Lowering: logical operators -> physical stages, one small function per operator."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import sqlglot
from sqlglot import exp

from semray.cost_model.cardinality import row_bound
from semray.errors import LoweringError
from semray.operators.base import Node
from semray.operators.expressions import DIALECT
from semray.operators.keys import operator_key
from semray.operators.relational import Aggregate, Distinct, Filter, Join, Limit, Project, Scan, Sort, Union
from semray.operators.safe_sql import isolated_connection
from semray.operators.schema import ROW_ID, quote
from semray.pipeline.fuse import fuse_batch_sql
from semray.pipeline.limit_rounds import first_round_rows, runs_in_rounds
from semray.pipeline.sizing import LIMIT_GROWTH, fits_one_task, limit_chain, limit_first_rows
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.relational import (
    PARTITION,
    BatchSqlStage,
    BroadcastJoinStage,
    GatherSqlStage,
    GrowingLimitStage,
    JoinStage,
    LimitStage,
    PartitionedSqlStage,
    ReadStage,
    SortStage,
    UnionStage,
)
from semray.pipeline.stages.set_ops import TopKStage
from semray.planner.capabilities import keeps_every_row
from semray.settings import Settings

RIGHT_ROW_ID = "_rowid_r"
JOIN_KEY = "_jk"


def lower(node: Node, settings: Settings) -> Stage:
    """The physical plan of a logical plan; raises LoweringError for unsupported operators."""
    handler = LOWERINGS.get(type(node))
    if handler is None:
        raise LoweringError(
            f"{type(node).__name__} has no physical implementation yet; "
            "semantic operators run once their execution lands (see docs/architecture.md)"
        )
    stage = fuse_batch_sql(handler(node, settings))
    if keeps_every_row(node) or isinstance(node, Limit):
        # EXPLAIN derives their rows from their input's (a step after a limit would let the
        # stream below it run on after the limit is reached).
        return stage
    # Tagged: the pipeline counts the rows this stage passes on as the operator's actual rows.
    return dataclasses.replace(stage, operators=(*stage.operators, operator_key(node)))


def lower_scan(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, Scan)
    return ReadStage(source=node.source, columns=node.columns, batch_rows=settings.batch_size)


def lower_filter(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, Filter)
    return BatchSqlStage(
        sql=f"SELECT * FROM batch WHERE ({node.predicate})",
        reason="filter",
        inputs=(lower(node.input, settings),),
    )


def lower_project(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, Project)
    items = ", ".join(f"({item.expr}) AS {quote(item.name)}" for item in node.exprs)
    return BatchSqlStage(
        sql=f"SELECT {ROW_ID}, {items} FROM batch",
        reason="project",
        keeps_rows=True,
        inputs=(lower(node.input, settings),),
    )


def lower_join(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, Join)
    if fits_one_task(node.right, settings.gather_rows):
        return _broadcast_join(node, settings)
    return _hash_join(node, settings)


def _broadcast_join(node: Join, settings: Settings) -> Stage:
    """Small right side: gather it once, join every left batch to it in DuckDB."""
    renames = node.right_names
    left_columns = [f"l.{quote(name)}" for name in node.left.output_schema.names if name != ROW_ID]
    kind = {"inner": "JOIN", "left": "LEFT JOIN", "semi": "SEMI JOIN", "anti": "ANTI JOIN"}[node.kind]
    if node.kind in ("semi", "anti"):
        select = ", ".join([f"l.{ROW_ID}", *left_columns])
    else:
        row_id = f"l.{ROW_ID} || '*' || coalesce(r.{ROW_ID}, '') AS {ROW_ID}"
        right_columns = [f"r.{quote(old)} AS {quote(new)}" for old, new in renames.items()]
        select = ", ".join([row_id, *left_columns, *right_columns])
    sql = f"SELECT {select} FROM batch AS l {kind} right_side AS r ON ({node.on})"
    right_schema = node.right.output_schema
    return BroadcastJoinStage(
        sql=sql,
        right_columns=tuple((c.name, c.type) for c in right_schema.columns),
        inputs=(lower(node.left, settings), lower(node.right, settings)),
    )


def _hash_join(node: Join, settings: Settings) -> Stage:
    """Both sides large: Ray Data's hash join on copies of the keys."""
    renames = node.right_names
    keys, residual = node.keys
    left_schema, right_schema = node.left.output_schema, node.right.output_schema
    # Ray's join coalesces key columns; joining on copies (cast to one type) keeps both
    # sides' columns intact, as SQL does.
    key_types = [common_type(left_schema.type_of(a), right_schema.type_of(b)) for a, b in keys]
    join_keys = tuple(f"{JOIN_KEY}{position}" for position in range(len(keys)))
    left_copies = ", ".join(
        f"CAST({quote(a)} AS {t}) AS {k}" for (a, _), t, k in zip(keys, key_types, join_keys, strict=True)
    )
    right_copies = ", ".join(
        f"CAST({quote(b)} AS {t}) AS {k}" for (_, b), t, k in zip(keys, key_types, join_keys, strict=True)
    )
    right_items = "".join(f", {quote(old)} AS {quote(new)}" for old, new in renames.items())
    left = BatchSqlStage(
        sql=f"SELECT *, {left_copies} FROM batch",
        reason="join: left keys",
        keeps_rows=True,
        inputs=(lower(node.left, settings),),
    )
    right = BatchSqlStage(
        sql=f"SELECT {ROW_ID} AS {RIGHT_ROW_ID}{right_items}, {right_copies} FROM batch",
        reason="join: rename right side, keys",
        keeps_rows=True,
        inputs=(lower(node.right, settings),),
    )
    kinds = {"inner": "inner", "left": "left_outer", "semi": "left_semi", "anti": "left_anti"}
    join = JoinStage(
        kind=kinds[node.kind],  # type: ignore[arg-type]
        left_keys=join_keys,
        right_keys=join_keys,
        num_partitions=partitions(node, settings),
        inputs=(left, right),
    )
    left_columns = [quote(name) for name in left_schema.names if name != ROW_ID]
    if node.kind in ("semi", "anti"):
        return BatchSqlStage(
            sql=f"SELECT {ROW_ID}, {', '.join(left_columns)} FROM batch",
            reason="join: order columns",
            keeps_rows=True,
            inputs=(join,),
        )
    row_id = f"{ROW_ID} || '*' || coalesce({RIGHT_ROW_ID}, '') AS {ROW_ID}"
    columns = ", ".join([row_id, *left_columns, *(quote(new) for new in renames.values())])
    where = f" WHERE ({_resolve_join_columns(residual, node)})" if residual else ""
    return BatchSqlStage(
        sql=f"SELECT {columns} FROM batch{where}",
        reason="join: row ids, residual",
        keeps_rows=not where,
        inputs=(join,),
    )


def partitions(node: Node, settings: Settings) -> int:
    """Shuffle partitions: about one per ``gather_rows`` rows, at least one per CPU."""
    count = row_bound(node) or 0
    per_partition = max(settings.gather_rows, 100_000)
    return max(settings.num_cpus, -(-count // per_partition))


def common_type(left: str, right: str) -> str:
    """The type DuckDB compares two key types in, e.g. BIGINT and DOUBLE -> DOUBLE."""
    if left == right:
        return left
    row = isolated_connection().execute(f"SELECT typeof(coalesce(NULL::{left}, NULL::{right}))").fetchone()
    assert row is not None
    return str(row[0])


def _resolve_join_columns(predicate: str, node: Join) -> str:
    """Rewrite ``l.x`` / ``r.y`` references to the joined batch's column names."""
    renames = node.right_names
    left_names = set(node.left.output_schema.names)

    def rename(part: exp.Expression) -> exp.Expression:
        if not isinstance(part, exp.Column):
            return part
        name = part.name
        if part.table == "r" or (not part.table and name not in left_names):
            name = renames[name]
        return exp.column(name, quoted=True)

    return sqlglot.parse_one(predicate, read=DIALECT).transform(rename).sql(dialect=DIALECT)


def lower_aggregate(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, Aggregate)
    keys = [quote(key) for key in node.keys]
    needed = sorted(node.columns_read())
    aggs = ", ".join(f"({item.expr}) AS {quote(item.name)}" for item in node.aggs)
    if keys:
        parts = ", ".join(f"coalesce(CAST({key} AS VARCHAR), '\\N')" for key in keys)
        row_id = f"'g:' || md5(concat_ws(chr(31), {parts}))"
        select = ", ".join([f"{row_id} AS {ROW_ID}", *keys] + ([aggs] if aggs else []))
        sql = f"SELECT {select} FROM batch GROUP BY {', '.join(keys)}"
    else:
        sql = f"SELECT 'all' AS {ROW_ID}, {aggs} FROM batch"
    return _partitioned(node, settings, tuple(node.keys), tuple(needed), sql, "aggregate")


def lower_distinct(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, Distinct)
    columns = [name for name in node.input.output_schema.names if name != ROW_ID]
    quoted = ", ".join(quote(name) for name in columns)
    sql = f"SELECT min({ROW_ID}) AS {ROW_ID}, {quoted} FROM batch GROUP BY {quoted}"
    return _partitioned(node, settings, tuple(columns), (ROW_ID, *columns), sql, "distinct")


def _partitioned(
    node: Aggregate | Distinct,
    settings: Settings,
    keys: tuple[str, ...],
    needed: tuple[str, ...],
    sql: str,
    reason: str,
) -> Stage:
    schema = node.input.output_schema
    typed = tuple((name, schema.type_of(name)) for name in needed)
    columns = ", ".join(quote(name) for name in needed) or "1 AS _unused"
    upstream = lower(node.input, settings)
    if not keys or fits_one_task(node.input, settings.gather_rows):
        prepare = BatchSqlStage(
            sql=f"SELECT {columns} FROM batch", reason=f"{reason}: columns", keeps_rows=True, inputs=(upstream,)
        )
        return GatherSqlStage(sql=sql, input_columns=typed, reason=reason, inputs=(prepare,))
    count = partitions(node.input, settings)
    prepare = BatchSqlStage(
        sql=(
            f"SELECT {columns}, CAST(hash({', '.join(quote(k) for k in keys)}) % {count} AS BIGINT) AS {PARTITION} "
            "FROM batch"
        ),
        reason=f"{reason}: columns and partition",
        keeps_rows=True,
        inputs=(upstream,),
    )
    return PartitionedSqlStage(
        partition_by=keys, num_partitions=count, sql=sql, input_columns=typed, reason=reason, inputs=(prepare,)
    )


def lower_sort(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, Sort)
    schema = node.input.output_schema
    names = schema.names
    upstream = lower(node.input, settings)
    if fits_one_task(node.input, settings.gather_rows):
        order = ", ".join(
            f"{quote(k.column)} {'DESC' if k.descending else 'ASC'} NULLS {'FIRST' if k.nulls_first else 'LAST'}"
            for k in node.keys
        )
        typed = tuple((c.name, c.type) for c in schema.columns)
        return GatherSqlStage(
            sql=f"SELECT * FROM batch ORDER BY {order}", input_columns=typed, reason="sort", inputs=(upstream,)
        )
    flags = []
    columns: list[str] = []
    descending: list[bool] = []
    for position, key in enumerate(node.keys):
        # DuckDB's default is NULLS LAST in both directions; an indicator column sorted
        # ascending before each key places nulls exactly, whatever Ray does with them.
        nulls_first = bool(key.nulls_first)
        flags.append(f"({quote(key.column)} IS {'NOT ' if nulls_first else ''}NULL) AS _null{position}")
        columns += [f"_null{position}", key.column]
        descending += [False, key.descending]
    prepare = BatchSqlStage(
        sql=f"SELECT *, {', '.join(flags)} FROM batch", reason="sort: null order", keeps_rows=True, inputs=(upstream,)
    )
    sort = SortStage(columns=tuple(columns), descending=tuple(descending), inputs=(prepare,))
    keep = ", ".join(quote(name) for name in names)
    return BatchSqlStage(sql=f"SELECT {keep} FROM batch", reason="sort: drop helpers", keeps_rows=True, inputs=(sort,))


def lower_limit(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, Limit)
    # Small model batches below a LIMIT: it stops the stream after a few of them.
    small_batches = settings.model_copy(update={"semantic_batch_max": settings.semantic_batch_size})
    first_rows = first_round_rows(node)
    # A cascade the LIMIT needs no more rows of than its calibration would label runs on the large
    # tier (sizing.limit_chain); a larger LIMIT keeps it, to calibrate on the first round.
    below = limit_chain(node) if first_rows is not None and limit_first_rows(node) is not None else node.input
    upstream = lower(below, small_batches)
    if first_rows is None or not runs_in_rounds(upstream):
        return LimitStage(count=node.count, offset=node.offset, inputs=(_ranked_only(upstream, node),))
    # A semantic chain right under the LIMIT: round trips that grow from about LIMIT / selectivity
    # rows, so the model is asked for little more than the rows the LIMIT keeps.
    return GrowingLimitStage(
        count=node.count,
        offset=node.offset,
        first_rows=first_rows,
        growth=LIMIT_GROWTH,
        max_rows=max(settings.semantic_batch_max, first_rows),
        inputs=(upstream,),
    )


def _ranked_only(stage: Stage, limit: Limit) -> Stage:
    """A top-k right under a LIMIT that keeps fewer rows sorts only those: its partial quicksort
    stops at ``count + offset`` (same candidates, the same first ranks, fewer comparisons)."""
    wanted = limit.count + limit.offset
    if type(stage) is not TopKStage or wanted >= stage.k:
        return stage
    return dataclasses.replace(stage, k=wanted)


def lower_union(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, Union)
    columns = ", ".join(quote(name) for name in node.output_schema.names if name != ROW_ID)
    branches = tuple(
        BatchSqlStage(
            sql=f"SELECT 'u{position}:' || {ROW_ID} AS {ROW_ID}" + (f", {columns}" if columns else "") + " FROM batch",
            reason="union: branch row ids",
            keeps_rows=True,
            inputs=(lower(child, settings),),
        )
        for position, child in enumerate(node.inputs)
    )
    return UnionStage(inputs=branches)


LOWERINGS: dict[type[Node], Callable[[Node, Settings], Stage]] = {
    Scan: lower_scan,
    Filter: lower_filter,
    Project: lower_project,
    Join: lower_join,
    Aggregate: lower_aggregate,
    Distinct: lower_distinct,
    Sort: lower_sort,
    Limit: lower_limit,
    Union: lower_union,
}


def _register_semantic() -> None:
    from semray.operators.code import SemCode
    from semray.pipeline.lower_semantic import SEMANTIC_LOWERINGS, lower_code
    from semray.pipeline.lower_set_ops import SET_LOWERINGS

    LOWERINGS.update(SEMANTIC_LOWERINGS)
    LOWERINGS.update(SET_LOWERINGS)
    LOWERINGS[SemCode] = lower_code


_register_semantic()
