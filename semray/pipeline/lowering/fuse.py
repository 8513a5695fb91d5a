"""Fuse chains of per-batch SQL stages into one statement per batch.

Filter, project and the helpers of joins and aggregates each lower to a BatchSqlStage;
run one after another they cost one DuckDB call (register, plan, execute) each per
batch. Nesting them as subqueries gives DuckDB one statement to optimise and run.
"""

from __future__ import annotations

import dataclasses

import sqlglot
from sqlglot import exp

from semray.operators.expressions import DIALECT
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.relational import BatchSqlStage


def fuse_batch_sql(stage: Stage) -> Stage:
    """Bottom-up: a BatchSqlStage over a BatchSqlStage becomes one stage, unless the inner one's
    rows are counted (``operators``) and the outer one may change how many there are."""
    inputs = tuple(fuse_batch_sql(child) for child in stage.inputs)
    stage = dataclasses.replace(stage, inputs=inputs) if inputs != stage.inputs else stage
    if isinstance(stage, BatchSqlStage) and isinstance(inputs[0], BatchSqlStage):
        inner = inputs[0]
        if inner.operators and not stage.keeps_rows:
            return stage
        return BatchSqlStage(
            sql=nest(stage.sql, inner.sql),
            reason=f"{inner.reason} + {stage.reason}",
            keeps_rows=inner.keeps_rows and stage.keeps_rows,
            inputs=inner.inputs,
            operators=(*inner.operators, *stage.operators),
        )
    return stage


def nest(outer: str, inner: str) -> str:
    """``outer`` with its table ``batch`` replaced by the subquery ``inner``.

    >>> nest("SELECT a FROM batch", "SELECT * FROM batch WHERE a > 1")
    'SELECT a FROM (SELECT * FROM batch WHERE a > 1) AS batch'
    """
    tree = sqlglot.parse_one(outer, read=DIALECT)
    body = sqlglot.parse_one(inner, read=DIALECT)
    replaced = False

    def swap(node: exp.Expression) -> exp.Expression:
        nonlocal replaced
        if isinstance(node, exp.Table) and node.name == "batch" and not node.db and not replaced:
            replaced = True
            alias = node.alias or "batch"
            return exp.Subquery(this=body.copy(), alias=exp.TableAlias(this=exp.to_identifier(alias)))
        return node

    fused = tree.transform(swap)
    if not replaced:
        raise ValueError(f"no table 'batch' in {outer!r}")
    return fused.sql(dialect=DIALECT)
