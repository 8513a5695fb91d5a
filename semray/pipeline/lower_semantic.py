"""Lowering of the row-wise semantic operators to actor-pool stages."""

from __future__ import annotations

import hashlib
from typing import Literal

from semray.operators.base import Node
from semray.operators.semantic import Semantic, SemClassify, SemExtract, SemFilter, SemMap
from semray.pipeline.spec import CascadeStage, SemanticStage, SemanticTask, Stage
from semray.settings import Settings

DEFAULT_TIER = "large"
"""What ``tier="auto"`` runs on until the cascade router chooses per row."""


def operator_key(node: Node) -> str:
    """Identifies an operator and its whole input, so committed rows are reused only for it."""
    return hashlib.sha256(node.model_dump_json().encode()).hexdigest()[:24]


def semantic_stage(node: Semantic, task: SemanticTask, settings: Settings) -> Stage:
    from semray.pipeline.lower import lower

    target = node.cascade_target()
    if target is not None:
        return CascadeStage(
            task=task,
            operator_key=operator_key(node),
            batch_rows=settings.semantic_batch_size,
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
        batch_rows=settings.semantic_batch_size,
        actors=settings.semantic_actors,
        inputs=(lower(node.input, settings),),
    )


def _tier(node: Semantic) -> str:
    if node.cascade_target() is not None:
        return "cascade"
    return DEFAULT_TIER if node.tier == "auto" else node.tier


def lower_sem_filter(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, SemFilter)
    task = SemanticTask(
        kind="filter",
        instruction=node.instruction,
        tier=_tier(node),
        on_error=node.on_error,
        diagnostics=node.diagnostics,
    )
    return semantic_stage(node, task, settings)


def lower_sem_map(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, SemMap)
    kind: Literal["score", "map"] = "score" if node.lo is not None else "map"
    task = SemanticTask(
        kind=kind,
        instruction=node.instruction,
        tier=_tier(node),
        outputs=((node.output, node.output_type),),
        lo=node.lo,
        hi=node.hi,
        on_error=node.on_error,
        diagnostics=node.diagnostics,
    )
    return semantic_stage(node, task, settings)


def lower_sem_classify(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, SemClassify)
    task = SemanticTask(
        kind="classify",
        instruction=node.instruction,
        tier=_tier(node),
        outputs=((node.output, "text"),),
        choices=node.labels,
        on_error=node.on_error,
        diagnostics=node.diagnostics,
    )
    return semantic_stage(node, task, settings)


def lower_sem_extract(node: Node, settings: Settings) -> Stage:
    assert isinstance(node, SemExtract)
    task = SemanticTask(
        kind="extract",
        instruction=node.instruction,
        tier=_tier(node),
        outputs=tuple((field.name, field.type) for field in node.fields),
        on_error=node.on_error,
        diagnostics=node.diagnostics,
    )
    return semantic_stage(node, task, settings)


SEMANTIC_LOWERINGS = {
    SemFilter: lower_sem_filter,
    SemMap: lower_sem_map,
    SemClassify: lower_sem_classify,
    SemExtract: lower_sem_extract,
}
