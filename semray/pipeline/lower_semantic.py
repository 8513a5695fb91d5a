"""Lowering of the row-wise semantic operators to actor-pool stages.

One function for all of them: an operator declares what it asks each row (``question``), the
columns it adds (``output_types``) and its tier (``resolved_tier``) on
``semray.operators.semantic.SemanticNode``, so a new row-wise operator needs nothing here.
"""

from __future__ import annotations

from semray.cost_model.statistics import statistics_key
from semray.errors import LoweringError
from semray.operators.base import Node
from semray.operators.code import SemCode
from semray.operators.keys import operator_key
from semray.operators.plan import ROW_SEMANTIC
from semray.operators.semantic import AUTO_TIER, Semantic, is_row_semantic
from semray.pipeline.sizing import semantic_batch_rows
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.code import CodeStage
from semray.pipeline.stages.semantic import CascadeStage, SemanticStage, SemanticTask
from semray.sandbox import Limits
from semray.settings import Settings

DEFAULT_TIER = AUTO_TIER
"""What ``tier="auto"`` runs on until the cascade router chooses per row."""


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


def semantic_stage(node: Semantic, task: SemanticTask, settings: Settings) -> Stage:
    from semray.pipeline.lower import lower

    target = node.cascades()
    if target is not None:
        return CascadeStage(
            task=task,
            operator_key=operator_key(node),
            batch_rows=semantic_batch_rows(node.input, settings),
            actors=settings.semantic_actors,
            inputs=(lower(node.input, settings),),
            metric=target.metric,
            level=target.level,
            delta=target.delta,
            labels=target.labels,
        )
    return SemanticStage(
        task=task,
        operator_key=operator_key(node),
        batch_rows=semantic_batch_rows(node.input, settings),
        actors=settings.semantic_actors,
        inputs=(lower(node.input, settings),),
    )


def lower_row_semantic(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, Semantic)
    return semantic_stage(node, semantic_task(node), settings)


SEMANTIC_LOWERINGS = dict.fromkeys(ROW_SEMANTIC, lower_row_semantic)


CODE_BATCH_ROWS = 1024
"""Rows per sandbox call: one pipe round trip per batch, cheap next to the function's work."""


def lower_code(node: Node, settings: Settings) -> Stage:
    from semray.pipeline.lower import lower

    assert isinstance(node, SemCode)
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
        inputs=(lower(node.input, settings),),
    )
