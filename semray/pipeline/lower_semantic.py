"""Lowering of the row-wise semantic operators to actor-pool stages."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Literal

from semray.cost_model.statistics import statistics_key
from semray.errors import LoweringError
from semray.operators.base import Node
from semray.operators.semantic import Semantic, SemClassify, SemExtract, SemFilter, SemMap
from semray.pipeline.sizing import semantic_batch_rows
from semray.pipeline.spec import CascadeStage, SemanticStage, SemanticTask, Stage
from semray.settings import Settings

DEFAULT_TIER = "large"
"""What ``tier="auto"`` runs on until the cascade router chooses per row."""


def operator_key(node: Node) -> str:
    """Identifies an operator and its whole input, so committed rows are reused only for it."""
    return hashlib.sha256(node.model_dump_json().encode()).hexdigest()[:24]


def semantic_task(node: Node) -> SemanticTask:
    """What a row-wise semantic operator asks of each row (its tier as lowering chooses it).

    Raises ``LoweringError`` for an operator that is not row-wise (joins, top-k, aggregates, search).
    """
    build = TASKS.get(type(node))
    if build is None:
        raise LoweringError(f"{node.label()} is not a row-wise semantic operator")
    return build(node)


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


def _tier(node: Semantic) -> str:
    if node.cascades() is not None:
        return "cascade"
    return DEFAULT_TIER if node.tier == "auto" else node.tier


def filter_task(node: Node) -> SemanticTask:
    assert isinstance(node, SemFilter)
    return SemanticTask(
        kind="filter",
        instruction=node.instruction,
        tier=_tier(node),
        on_error=node.on_error,
        diagnostics=node.diagnostics,
        question_key=statistics_key(node),
    )


def map_task(node: Node) -> SemanticTask:
    assert isinstance(node, SemMap)
    kind: Literal["score", "map"] = "score" if node.lo is not None else "map"
    return SemanticTask(
        kind=kind,
        instruction=node.instruction,
        tier=_tier(node),
        outputs=((node.output, node.output_type),),
        lo=node.lo,
        hi=node.hi,
        on_error=node.on_error,
        diagnostics=node.diagnostics,
        question_key=statistics_key(node),
    )


def classify_task(node: Node) -> SemanticTask:
    assert isinstance(node, SemClassify)
    return SemanticTask(
        kind="classify",
        instruction=node.instruction,
        tier=_tier(node),
        outputs=((node.output, "text"),),
        choices=node.labels,
        on_error=node.on_error,
        diagnostics=node.diagnostics,
        question_key=statistics_key(node),
    )


def extract_task(node: Node) -> SemanticTask:
    assert isinstance(node, SemExtract)
    return SemanticTask(
        kind="extract",
        instruction=node.instruction,
        tier=_tier(node),
        outputs=tuple((field.name, field.type) for field in node.fields),
        on_error=node.on_error,
        diagnostics=node.diagnostics,
        question_key=statistics_key(node),
    )


TASKS: dict[type[Node], Callable[[Node], SemanticTask]] = {
    SemFilter: filter_task,
    SemMap: map_task,
    SemClassify: classify_task,
    SemExtract: extract_task,
}


def lower_row_semantic(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, Semantic)
    return semantic_stage(node, semantic_task(node), settings)


SEMANTIC_LOWERINGS = dict.fromkeys(TASKS, lower_row_semantic)
