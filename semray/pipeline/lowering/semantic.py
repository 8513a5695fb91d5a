"""Lowering of the row-wise semantic operators to actor-pool stages, and of SemCode.

One function for all the row-wise ones: an operator declares what it asks each row (``question``),
the columns it adds (``output_types``) and its tier (``resolved_tier``) on
``semray.operators.semantic.SemanticNode``, so a new row-wise operator needs nothing here.
"""

from __future__ import annotations

import dataclasses

from semray.errors import LoweringError
from semray.operators.base import Node
from semray.operators.code import SemCode
from semray.operators.keys import operator_key, statistics_key
from semray.operators.plan import ROW_SEMANTIC
from semray.operators.semantic import Semantic, is_row_semantic
from semray.pipeline.lowering.registry import Inputs, Lowering
from semray.pipeline.lowering.sizing import semantic_batch_rows, semantic_pool_size
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.code import CodeStage
from semray.pipeline.stages.semantic import CascadeStage, SemanticStage, SemanticTask
from semray.sandbox import Limits
from semray.settings import Settings


def semantic_task(node: Node) -> SemanticTask:
    """What a row-wise semantic operator asks of each row (its tier as lowering chooses it).

    Raises ``LoweringError`` for an operator that is not row-wise (joins, top-k, aggregates, search).
    """
    if not isinstance(node, Semantic) or not is_row_semantic(node):
        raise LoweringError(f"{node.label()} is not a row-wise semantic operator")
    question = node.question()
    return SemanticTask(
        kind=question.kind,
        instruction=question.instruction,
        tier=node.resolved_tier(),
        outputs=node.output_types(),
        choices=question.choices,
        lo=question.lo,
        hi=question.hi,
        on_error=node.on_error,
        diagnostics=node.diagnostics,
        question_key=statistics_key(node),
    )


def lower_row_semantic(node: Semantic, inputs: Inputs, settings: Settings) -> Stage:
    """An actor pool asking ``node``'s question of each row, or a cascade of tiers when it has a
    certifiable quality target."""
    task, key = semantic_task(node), operator_key(node)
    batch_rows = semantic_batch_rows(node.input, settings)
    actors = semantic_pool_size(node.input, settings, batch_rows)
    stage = SemanticStage(task=task, operator_key=key, batch_rows=batch_rows, actors=actors, inputs=inputs)
    target = node.cascades()
    if target is None:
        return stage
    # The same stage, its rows routed embedding -> small -> large to meet the target.
    fields = {field.name: getattr(stage, field.name) for field in dataclasses.fields(stage)}
    return CascadeStage(**fields, metric=target.metric, level=target.level, delta=target.delta, labels=target.labels)


CODE_BATCH_ROWS = 1024
"""Rows per sandbox call: one pipe round trip per batch, cheap next to the function's work."""


def lower_code(node: SemCode, inputs: Inputs, settings: Settings) -> Stage:
    """SemCode: its committed function over each batch, in a sandboxed process per actor."""
    if node.code is None or node.code_sha256 is None:
        raise LoweringError(
            f"SemCode {node.instruction!r} has no code yet; run the query (the large tier writes the function "
            "at plan time), call Query.with_code(), or supply code=..."
        )
    limits = Limits(node.limits.cpu_s, node.limits.memory_mb, node.limits.wall_s)
    return CodeStage(
        code=node.code,
        code_sha256=node.code_sha256,
        columns=node.inputs,
        outputs=node.output_types(),
        limits=limits,
        batch_rows=min(CODE_BATCH_ROWS, max(settings.batch_size, 1)),
        actors=max(1, settings.semantic_actors),
        instruction=node.instruction,
        inputs=inputs,
    )


ROW_SEMANTIC_LOWERINGS = tuple(Lowering(operator, lower_row_semantic) for operator in ROW_SEMANTIC)
CODE_LOWERING = Lowering(SemCode, lower_code)
