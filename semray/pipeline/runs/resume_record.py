"""What a transactional run journals about a query, and how a resume rebuilds it.

A run's journal holds the *logical* plan document (``plan``) and, in ``config``, the
physical plan text, the settings that shape lowering, the serving configuration and
whether the plan reads in-memory tables. The fingerprint that automatic resume matches on
covers the plan and the models of the tiers it calls, so a re-run on another model never
reuses answers paid for on the old one.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from semray.operators import Node, Scan, plan_to_json, walk
from semray.operators.serialize import plan_from_dict, plan_from_json
from semray.pipeline.lowering.driver import lower
from semray.pipeline.runs.actor_ledger import CancellableLedger as CancellableLedger  # its home until now
from semray.pipeline.stages.base import Stage, render_stages
from semray.pipeline.stages.semantic import CascadeStage, SemanticStage
from semray.pipeline.stages.set_ops import CatalogSearchStage
from semray.serving.config import ServingConfig
from semray.settings import Settings
from semray.transactions import RunDetail, RunStateError, fingerprint

LOWERING_SETTINGS = ("batch_size", "gather_rows", "semantic_batch_size", "semantic_batch_max", "semantic_actors")
"""Settings that change the physical plan; a resume by id lowers with the journaled values."""


@dataclass(frozen=True, slots=True)
class Job:
    """A lowered query and what its run journals, e.g. ``Job.prepare(plan, settings, None).tiers``."""

    plan: Node
    settings: Settings
    stages: Stage
    tiers: tuple[str, ...]
    """Model tiers the semantic stages call; empty for a purely relational plan."""
    serving: ServingConfig | None
    """None when no tier is called."""

    @classmethod
    def prepare(cls, plan: Node, settings: Settings, serving: ServingConfig | None) -> Job:
        stages = lower(plan, settings)
        tiers = tuple(sorted(model_tiers(stages)))
        config = (serving or ServingConfig()) if tiers else None
        if config is not None:
            stages = fit_to_context(stages, config)
        return cls(plan, settings, stages, tiers, config)

    @property
    def document(self) -> dict[str, Any]:
        """The logical plan as journaled (the JSON plan document)."""
        document: dict[str, Any] = json.loads(plan_to_json(self.plan, indent=None))
        return document

    @property
    def reads_memory(self) -> bool:
        """True when a source is an in-memory table (``from_arrow``/``from_pandas``)."""
        return any(isinstance(node, Scan) and node.source.kind == "memory" for node in walk(self.plan))

    @property
    def simulated(self) -> bool:
        serving = self.serving
        return serving is not None and any(serving.tier(tier).backend == "simulated" for tier in self.tiers)

    def fingerprint(self) -> str:
        """What automatic resume matches: the plan and the model behind every tier it calls."""
        models = {tier: _model_identity(self.serving, tier) for tier in self.tiers}
        return fingerprint({"plan": self.document, "models": models})

    def journal_config(self) -> dict[str, Any]:
        return {
            "physical_plan": render_stages(self.stages),
            "settings": {name: getattr(self.settings, name) for name in LOWERING_SETTINGS},
            "serving": self.serving.model_dump(mode="json") if self.serving is not None else None,
            "tiers": list(self.tiers),
            "memory_sources": self.reads_memory,
            "pid": os.getpid(),
        }


def fit_to_context(stage: Stage, config: ServingConfig) -> Stage:
    """Shrink each SemAgg stage's prompt budget to its tier's context length where that is smaller
    (lowering sees no serving config, so it plans for `AGG_CONTEXT_TOKENS`)."""
    from semray.pipeline.stages.set_ops import AggStage

    inputs = tuple(fit_to_context(child, config) for child in stage.inputs)
    if isinstance(stage, AggStage):
        context = tier_context_length(config, stage.task.tier)
        if context is not None and context < stage.context_tokens:
            return dataclasses.replace(stage, context_tokens=context, inputs=inputs)
    return dataclasses.replace(stage, inputs=inputs) if inputs != stage.inputs else stage


def tier_context_length(config: ServingConfig, tier: str) -> int | None:
    """The context length a tier states: its own setting, else its simulated model's."""
    settings = config.tier(tier)
    if settings.context_length is not None:
        return settings.context_length
    if settings.backend == "simulated":
        profile = config.simulator.models.get(settings.model) if config.simulator is not None else None
        return profile.context_length if profile is not None else None
    return None


def model_tiers(stage: Stage) -> set[str]:
    """Tiers the semantic stages of a physical plan call."""
    tiers = {stage.task.tier} if isinstance(stage, SemanticStage) else set()
    if isinstance(stage, CatalogSearchStage):
        tiers |= stage.model_tiers()
    if isinstance(stage, CascadeStage):
        tiers = {"embedding", "small", "large"}
    for child in stage.inputs:
        tiers |= model_tiers(child)
    return tiers


def job_to_resume(detail: RunDetail, settings: Settings, serving: ServingConfig | None) -> Job:
    """Rebuild the job a run executed from its journal: its plan, lowering settings and tiers.

    ``serving`` wins over the journaled serving configuration (which cannot hold in-memory
    simulator tables). Raises ``RunStateError`` when the run cannot be executed here.
    """
    plan = plan_from_json(detail.plan) if isinstance(detail.plan, str) else plan_from_dict(detail.plan)
    config = detail.config
    journaled = {key: value for key, value in (config.get("settings") or {}).items() if key in LOWERING_SETTINGS}
    settings = settings.model_copy(update=journaled)
    if config.get("memory_sources") and _started_pid(detail) != os.getpid():
        raise RunStateError(
            f"run {detail.run_id} reads an in-memory table (from_arrow/from_pandas), which lived only in the "
            "process that started it; it cannot be resumed in another process. Save the table to Parquet "
            "and run the query again"
        )
    job = Job.prepare(plan, settings, serving)
    if job.tiers and serving is None:
        job = _with_journaled_serving(job, detail)
    physical = render_stages(job.stages)
    if config.get("physical_plan") not in (None, physical):
        raise RunStateError(
            f"run {detail.run_id} lowers to another physical plan now than when it started (a source or "
            "semray changed); its committed batches may not apply. Start a new run instead"
        )
    return job


def _with_journaled_serving(job: Job, detail: RunDetail) -> Job:
    raw = detail.config.get("serving")
    if raw is None:
        return job
    try:
        serving = ServingConfig.model_validate(raw)
    except ValidationError as error:
        raise RunStateError(
            f"run {detail.run_id}'s serving configuration cannot be rebuilt from its journal ({error.error_count()} "
            "problem(s), e.g. simulator datasets given as in-memory tables); resume it from Python with "
            "semray.pipeline.runs.execute.resume(settings, run_id, serving=...)"
        ) from None
    return Job.prepare(job.plan, job.settings, serving)


def _started_pid(detail: RunDetail) -> int | None:
    pid = detail.config.get("pid")
    return pid if isinstance(pid, int) else None


def _model_identity(serving: ServingConfig | None, tier: str) -> str:
    if serving is None:
        return tier
    config = serving.tier(tier)
    return f"{config.backend}:{config.model}"
