"""Lowering of the relational operators: one function per operator, given its inputs lowered.

Filter and Project are per-batch SQL; a Join broadcasts a small right side or hash-joins large
ones; Aggregate, Distinct and Sort gather a small input into one task or shuffle a large one
(``sizing.fits_one_task``); a LIMIT over a chain of semantic operators runs in round trips that
grow (``GrowingLimitStage``), its input lowered with small model batches (``limit_inputs``).
"""

from __future__ import annotations

import dataclasses

import sqlglot
from sqlglot import exp

from semray.cost_model.cardinality import row_bound
from semray.cost_model.limit_chain import first_round_rows, limit_input
from semray.cost_model.topk_rule import prefilter_rows
from semray.operators.base import Node
from semray.operators.expressions import DIALECT
from semray.operators.relational import Aggregate, Distinct, Filter, Join, Limit, Project, Scan, Sort, Union
from semray.operators.safe_sql import isolated_connection
from semray.operators.schema import ROW_ID, quote
from semray.pipeline.lowering.registry import InputPlan, Inputs, Lowering
from semray.pipeline.lowering.sizing import LIMIT_GROWTH, fits_one_task, runs_in_rounds
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
from semray.settings import Settings

RIGHT_ROW_ID = "_rowid_r"
JOIN_KEY = "_jk"


def lower_scan(node: Scan, inputs: Inputs, settings: Settings) -> Stage:
    return ReadStage(source=node.source, columns=node.columns, batch_rows=settings.batch_size)


def lower_filter(node: Filter, inputs: Inputs, settings: Settings) -> Stage:
    return BatchSqlStage(
        sql=f"SELECT * FROM batch WHERE ({node.predicate})",
        reason="filter",
        inputs=inputs,
    )


def lower_project(node: Project, inputs: Inputs, settings: Settings) -> Stage:
    items = ", ".join(f"({item.expr}) AS {quote(item.name)}" for item in node.exprs)
    return BatchSqlStage(
        sql=f"SELECT {ROW_ID}, {items} FROM batch",
        reason="project",
        keeps_rows=True,
        inputs=inputs,
    )


def lower_join(node: Join, inputs: Inputs, settings: Settings) -> Stage:
    left, right = inputs
    if fits_one_task(node.right, settings.gather_rows):
        return _broadcast_join(node, left, right)
    return _hash_join(node, left, right, settings)


def _broadcast_join(node: Join, left: Stage, right: Stage) -> Stage:
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
        inputs=(left, right),
    )


def _hash_join(node: Join, left: Stage, right: Stage, settings: Settings) -> Stage:
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
    left_keyed = BatchSqlStage(
        sql=f"SELECT *, {left_copies} FROM batch",
        reason="join: left keys",
        keeps_rows=True,
        inputs=(left,),
    )
    right_keyed = BatchSqlStage(
        sql=f"SELECT {ROW_ID} AS {RIGHT_ROW_ID}{right_items}, {right_copies} FROM batch",
        reason="join: rename right side, keys",
        keeps_rows=True,
        inputs=(right,),
    )
    kinds = {"inner": "inner", "left": "left_outer", "semi": "left_semi", "anti": "left_anti"}
    join = JoinStage(
        kind=kinds[node.kind],  # type: ignore[arg-type]
        left_keys=join_keys,
        right_keys=join_keys,
        num_partitions=partitions(node, settings),
        inputs=(left_keyed, right_keyed),
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


def lower_aggregate(node: Aggregate, inputs: Inputs, settings: Settings) -> Stage:
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
    return _partitioned(node, inputs, settings, tuple(node.keys), tuple(needed), sql, "aggregate")


def lower_distinct(node: Distinct, inputs: Inputs, settings: Settings) -> Stage:
    columns = [name for name in node.input.output_schema.names if name != ROW_ID]
    quoted = ", ".join(quote(name) for name in columns)
    sql = f"SELECT min({ROW_ID}) AS {ROW_ID}, {quoted} FROM batch GROUP BY {quoted}"
    return _partitioned(node, inputs, settings, tuple(columns), (ROW_ID, *columns), sql, "distinct")


def _partitioned(
    node: Aggregate | Distinct,
    inputs: Inputs,
    settings: Settings,
    keys: tuple[str, ...],
    needed: tuple[str, ...],
    sql: str,
    reason: str,
) -> Stage:
    schema = node.input.output_schema
    typed = tuple((name, schema.type_of(name)) for name in needed)
    columns = ", ".join(quote(name) for name in needed) or "1 AS _unused"
    (upstream,) = inputs
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


def lower_sort(node: Sort, inputs: Inputs, settings: Settings) -> Stage:
    schema = node.input.output_schema
    names = schema.names
    (upstream,) = inputs
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


def limit_inputs(node: Limit, settings: Settings) -> InputPlan:
    """What a LIMIT lowers as its input: ``node.input`` with small model batches (it stops the stream
    after a few of them), and with a cascade the LIMIT needs no more rows of than its calibration
    would label on the large tier (``cost_model/limit_chain.limit_input``, the rule the cost model
    prices too); a larger LIMIT keeps the cascade, to calibrate on the first round."""
    small_batches = settings.model_copy(update={"semantic_batch_max": settings.semantic_batch_size})
    return ((limit_input(node), small_batches),)


def lower_limit(node: Limit, inputs: Inputs, settings: Settings) -> Stage:
    (upstream,) = inputs
    first_rows = first_round_rows(node)
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
    """A top-k right under a LIMIT that keeps fewer rows runs as the top ``count + offset``: its
    prefilter keeps ``prefilter_rows(count + offset)`` candidates and its partial quicksort stops at
    ``count + offset``, so its comparisons follow the LIMIT, not k. Exact as ``sem_topk(k=count +
    offset)`` is (the same candidates and comparisons); its ranks equal the first ranks of the k-run
    whenever the LIMIT's top rows are among the fewer candidates (always for inputs of at most 32
    rows), docs/set_ops.md."""
    wanted = limit.count + limit.offset
    if type(stage) is not TopKStage or wanted >= stage.k:
        return stage
    return dataclasses.replace(stage, k=wanted, prefilter=min(stage.prefilter, prefilter_rows(wanted)))


def lower_union(node: Union, inputs: Inputs, settings: Settings) -> Stage:
    columns = ", ".join(quote(name) for name in node.output_schema.names if name != ROW_ID)
    branches = tuple(
        BatchSqlStage(
            sql=f"SELECT 'u{position}:' || {ROW_ID} AS {ROW_ID}" + (f", {columns}" if columns else "") + " FROM batch",
            reason="union: branch row ids",
            keeps_rows=True,
            inputs=(branch,),
        )
        for position, branch in enumerate(inputs)
    )
    return UnionStage(inputs=branches)


RELATIONAL_LOWERINGS = (
    Lowering(Scan, lower_scan),
    Lowering(Filter, lower_filter),
    Lowering(Project, lower_project),
    Lowering(Join, lower_join),
    Lowering(Aggregate, lower_aggregate),
    Lowering(Distinct, lower_distinct),
    Lowering(Sort, lower_sort),
    Lowering(Limit, lower_limit, inputs=limit_inputs),
    Lowering(Union, lower_union),
)
