"""``semray.ask``: a question in plain language -> a validated plan, its answer, and what it cost.

The planning agents (``semray.planner.agents``) draft and validate the plan on a real LLM tier
(the profile's ``large`` tier); with only simulated tiers configured ``ask`` refuses with
``PlanningNeedsModelError`` unless recorded answers are given (``replay=``). The plan then runs
like any other (``Query.execute``), and an execution error goes back into the loop. Long-term
memory is the catalog's memory table (``MemoryStore`` under ``Settings.catalog_path``, tasks
embedded with the profile's embedding tier, loaded only when memory is searched or written);
``memory=ListMemory(path)`` (``semray ask --memory-file FILE``) keeps it in a JSON file instead.

Every unit and attempt of the planning is journaled under ``<state_dir>/asks/<ask_id>/``
(``planner/agents/ask_journal.py``). An ask killed at any point goes on where it stopped, paying nothing
again for its committed units, when the same ask is made again (same question, model, datasets and loop
settings) or by id: ``ask(question, resume=ask_id)``, ``semray ask --resume ID``. ``semray runs show
ID`` renders its trace. With a scorer tier (``Settings.agent_scorer_model``, a local transformers model,
or the model profile's ``[scorer]`` table, an endpoint's prompt logprobs:
``planner/agents/scorer_tier.py``) the dataset choice is checked by decision confidence divergence
(``agent_decision_margin``), exploration of candidate datasets stops early once one adds little
(``agent_stop_divergence``) and a draft whose spans the evidence does not support is retried
(``agent_span_divergence``); prompts keep the verdicts of the newest ``agent_context_units`` failed
attempts. A stored skill is reused for a question of its template, or of other words at least
``agent_skill_similarity`` alike under the memory's embedding tier (``planner/agents/skills.py``),
validated again first. With ``agent_candidates`` above 1 the plan unit drafts that many candidates per
attempt (competitive sub-agents, ``planner/agents/competition.py``): the cheapest valid one under the
serving profiles' prices wins; ``agent_collaborators`` and ``agent_dataset_agents`` switch on the
collaborative and independent sub-agents (``collaboration.py``, ``dataset_agents.py``), at most
``agent_parallelism`` at once.

After a plan ran, the model reflects on its answer (``planner/agents/reflection.py``; on by default for a real
LLM tier, ``Settings.agent_reflection``): an implausible answer sends its reason to a new plan unit, and one
kept after the last draft is returned flagged (``AskResult.failed_reflection``, ``AskResult.warning``) and the
ask ends ``unverified``.

The engine runs of an ask (``AskExecutor``): each run's id is journaled in the ask's trace while the
run goes (``RunLink``, a progress reporter: a ``run_linked`` record at the run's first progress poll,
half a second after the run opened its journal, long before its first batch is paid), so ``semray runs
show ASK_ID`` links the run while it goes; a resumed ask whose plan is one an earlier process linked
resumes that run by id (``pipeline.runs.execute.resume``: its committed batches are not paid again); a linked
run that cannot be resumed (it succeeded, or it is gone) is run afresh, as is a plan never linked.

>>> result = semray.ask("average rating per product", tables={"reviews": "reviews.csv"})  # doctest: +SKIP
>>> print(result.plan_json)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from semray.cost_model.prices import profiles_from_serving
from semray.log import get_logger
from semray.operators import Node, plan_to_json
from semray.planner.agents import (
    AgentModel,
    AgentStep,
    CatalogView,
    LoopConfig,
    MemoryView,
    RecordedModel,
    SourceCatalog,
    StepRunner,
    TierModel,
    plan_question,
)
from semray.planner.agents.ask_journal import AskTrace, RunLinked, open_ask_trace, resume_ask_trace
from semray.planner.agents.competition import plan_cost
from semray.planner.agents.confidence import Scorer
from semray.planner.agents.errors import AgentError
from semray.planner.agents.reflection import Reflection
from semray.planner.agents.scorer_tier import EndpointScorer, scorer_for, scorer_identity
from semray.planner.agents.skills import Similarity, embedding_similarity
from semray.planner.agents.units import UnitPolicy
from semray.serving.config import ServingConfig
from semray.serving.profiles import resolve_serving
from semray.settings import Settings

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class AskResult:
    """What ``ask`` gives back: the answer rows (None on a dry run), the plan, and every step."""

    question: str
    answer: pa.Table | None
    plan_json: str
    datasets: tuple[str, ...]
    steps: tuple[AgentStep, ...]
    ask_id: str
    run_id: str | None
    iterations: int
    usage_line: str = ""
    skill: str | None = None
    """The question of the stored skill the plan came from, validated again (None: planned anew)."""
    reflection: Reflection | None = None
    """What the model said of the answer after it ran (None: reflection off, or a dry run)."""

    @property
    def failed_reflection(self) -> bool:
        """The answer is the last draft's although it failed reflection: report it so, never as a clean success."""
        return self.reflection is not None and self.reflection.failed

    def warning(self) -> str:
        """``WARNING: the answer failed reflection: ...`` when it did; a note when the reply was unreadable; else ""."""
        if self.reflection is None or self.reflection.verdict == "plausible":
            return ""
        if self.reflection.failed:
            return (
                f"WARNING: the answer failed reflection after the last draft ({self.iterations}): "
                f"{self.reflection.reason}; it may not answer the question (ask {self.ask_id}: semray runs show "
                f"{self.ask_id})"
            )
        return "note: the reflection on the answer could not be read; the answer is not checked"

    @property
    def planning_dollars(self) -> float:
        return sum(step.dollars for step in self.steps)

    @property
    def planning_tokens(self) -> int:
        return sum(step.input_tokens + step.output_tokens for step in self.steps)


def ask(
    question: str,
    *,
    tables: Mapping[str, str | Path] | None = None,
    catalog: CatalogView | None = None,
    memory: MemoryView | None = None,
    settings: Settings | None = None,
    serving: ServingConfig | None = None,
    model: AgentModel | None = None,
    replay: Path | None = None,
    dry_run: bool = False,
    max_cost: float | None = None,
    config: LoopConfig | None = None,
    scorer: Scorer | None = None,
    resume: str | None = None,
    arguments: Mapping[str, Any] | None = None,
    on_start: Callable[[str, bool], None] | None = None,
) -> AskResult:
    """Plan a question over ``tables`` (name -> file) or a ``catalog``, run it unless ``dry_run``.

    ``resume`` names an interrupted ask to go on with (else the newest interrupted one of the same
    ask is resumed, if any); ``arguments`` are journaled beside it for a resume by id (the CLI's
    flags); ``on_start(ask_id, resumed)`` is told the ask's id before any step runs.
    """
    settings = settings or Settings()
    serving = serving or resolve_serving(settings.models)
    agent_model = model or _model(serving, replay)
    view = catalog or _catalog(tables, settings, serving)
    store, similarity = (memory, None) if memory is not None else _memory(settings, serving)
    config = replace(config or loop_config(settings), reflection=_reflects(settings, agent_model, config))
    trace = _trace(
        settings,
        question,
        agent_model.name,
        _ask_key(tables, catalog, settings, serving, dry_run, config),
        resume,
        {
            "replay": None if replay is None else str(replay.expanduser().absolute()),
            **dict(arguments or {}),
        },
    )
    executor = AskExecutor(trace, settings, serving)
    runner = StepRunner(agent_model, max_cost)
    own_scorer: Scorer | None = None
    try:
        if on_start is not None:
            on_start(trace.ask_id, trace.resumed)
        own_scorer = None if scorer is not None else scorer_for(settings, serving)
        planned = plan_question(
            question,
            catalog=view,
            model=agent_model,
            memory=store,
            config=config,
            executor=None if dry_run else executor,
            runner=runner,
            run_id=trace.ask_id,
            trace=trace,
            scorer=scorer or own_scorer,
            similarity=similarity,
            cost=plan_cost(profiles_from_serving(serving)),
        )
    finally:
        trace.close()  # an ask that did not finish stays resumable
        if isinstance(own_scorer, EndpointScorer):
            own_scorer.close()
    result = executor.results[-1] if executor.results else None
    log.info(
        "question_answered",
        ask_id=trace.ask_id,
        resumed=trace.resumed,
        dollars=runner.trace.dollars,
        iterations=planned.iterations,
    )
    return AskResult(
        question=question,
        answer=None if result is None else result.table,
        plan_json=planned.plan_json,
        datasets=planned.datasets,
        steps=tuple(runner.trace.steps),
        ask_id=trace.ask_id,
        run_id=None if result is None else result.run_id,
        iterations=planned.iterations,
        usage_line="" if result is None else result.usage_line(),
        skill=planned.skill,
        reflection=planned.reflection,
    )


Start = Callable[[Node, Any], Any]
"""Runs a plan with a progress reporter: ``Query(plan, settings, serving).execute(progress=reporter)``."""
Resume = Callable[[str, Any], Any]
"""Resumes a run by id with a progress reporter:
``pipeline.runs.execute.resume(settings, run_id, serving, reporter)``."""


def plan_digest(plan: Node) -> str:
    """What tells a run's plan from another's in the ask journal: ``plan_digest(plan) == plan_digest(plan)``."""
    return hashlib.sha256(plan_to_json(plan, indent=None).encode()).hexdigest()[:24]


class RunLink:
    """A ``ProgressReporter`` that journals its run's id once, at the first progress it sees, then passes on."""

    def __init__(self, trace: AskTrace, plan: str, inner: Any) -> None:
        self.trace, self.plan, self.inner = trace, plan, inner
        self.run_id: str | None = None
        self._lock = threading.Lock()

    def update(self, progress: Any, eta_s: float | None) -> None:
        self._link(progress.run_id)
        self.inner.update(progress, eta_s)

    def close(self, progress: Any) -> None:
        self._link(progress.run_id)
        self.inner.close(progress)

    def _link(self, run_id: str) -> None:
        with self._lock:
            if self.run_id == run_id:
                return
            self.run_id = run_id
        self.trace.append(RunLinked(attempt=self.trace.attempt, run_id=run_id, plan=self.plan))
        log.info("ask_run_linked", ask_id=self.trace.ask_id, run_id=run_id)


class AskExecutor:
    """Runs an ask's validated plans on the engine, each run linked in the ask's trace (module docstring)."""

    def __init__(
        self,
        trace: AskTrace,
        settings: Settings,
        serving: ServingConfig,
        start: Start | None = None,
        resume: Resume | None = None,
    ) -> None:
        self.trace, self.settings, self.serving = trace, settings, serving
        self._start = start or self._query
        self._resume = resume or self._resume_by_id
        self.results: list[Any] = []

    def __call__(self, plan: Node) -> Any:
        digest = plan_digest(plan)
        reporter = RunLink(self.trace, digest, self._reporter())
        linked = self.trace.linked_run(digest) if self.trace.resumed else None
        result = None if linked is None else self._resumed(linked, reporter)
        if result is None:
            result = self._start(plan, reporter)
        self.results.append(result)
        return result

    def _resumed(self, run_id: str, reporter: RunLink) -> Any:
        from semray.transactions.errors import RunInUseError, RunNotFoundError, RunStateError

        try:
            result = self._resume(run_id, reporter)
        except RunInUseError:
            raise  # a live process drives it: the ask cannot go on with it now
        except (RunStateError, RunNotFoundError) as error:
            log.info("ask_run_not_resumed", run_id=run_id, reason=str(error)[:200])
            return None
        log.info("ask_run_resumed", ask_id=self.trace.ask_id, run_id=run_id)
        return result

    def _reporter(self) -> Any:
        from semray.pipeline.runs.progress import LogReporter

        return LogReporter(self.settings.progress_interval_s)

    def _query(self, plan: Node, reporter: Any) -> Any:
        from semray.query import Query

        return Query(plan, self.settings, self.serving).execute(progress=reporter)

    def _resume_by_id(self, run_id: str, reporter: Any) -> Any:
        from semray.pipeline.runs.execute import resume

        return resume(self.settings, run_id, self.serving, reporter)


def loop_config(settings: Settings, **bounds: Any) -> LoopConfig:
    """The planning loop's bounds, its units' from ``settings``: ``loop_config(settings, judges=5)``."""
    units = UnitPolicy(
        max_retries=settings.agent_max_retries,
        max_units=settings.agent_max_units,
        decision_margin=settings.agent_decision_margin,
        span_divergence=settings.agent_span_divergence,
        stop_divergence=settings.agent_stop_divergence,
        context_units=settings.agent_context_units,
    )
    bounds.setdefault("skill_similarity", settings.agent_skill_similarity)
    bounds.setdefault("candidates", settings.agent_candidates)
    bounds.setdefault("collaborators", settings.agent_collaborators)
    bounds.setdefault("dataset_agents", settings.agent_dataset_agents)
    bounds.setdefault("parallelism", settings.agent_parallelism)
    return LoopConfig(units=units, **bounds)


def _ask_key(
    tables: Mapping[str, str | Path] | None,
    catalog: CatalogView | None,
    settings: Settings,
    serving: ServingConfig,
    dry_run: bool,
    config: LoopConfig,
) -> str:
    """What besides the question and the model makes two asks the same ask (and a resume legitimate)."""
    if tables:
        over: Any = {name: str(Path(path).expanduser().absolute()) for name, path in sorted(tables.items())}
    else:
        over = type(catalog).__name__ if catalog is not None else str(settings.catalog_path)
    bounds = {
        "max_iterations": config.drafts,
        "judges": config.judges,
        "semantic": config.semantic,
        "memory": config.memory,
        "skills": config.skills,
        "skill_similarity": config.skill_similarity,
        "candidates": config.candidates,
        "subagents": [config.collaborators, config.dataset_agents],
        "units": [config.units.max_retries, config.units.max_units, config.units.decision_margin],
        "signals": [config.units.span_divergence, config.units.stop_divergence, config.units.context_units],
        "scorer": scorer_identity(settings, serving),
        "reflection": config.reflection,
    }
    return json.dumps({"datasets": over, "dry_run": dry_run, "loop": bounds}, sort_keys=True)


def _trace(
    settings: Settings, question: str, model: str, key: str, resume: str | None, arguments: dict[str, Any]
) -> AskTrace:
    if resume is not None:
        return resume_ask_trace(settings.state_path, resume, question, model, key)
    return open_ask_trace(settings.state_path, question, model, key, arguments)


def _reflects(settings: Settings, model: AgentModel, config: LoopConfig | None) -> bool:
    """Reflection is on when the settings say so; by default when the caller's loop asks for it or the planner is a
    configured real LLM tier (recorded answers and stand-ins reflect only when told: they may hold no reflection)."""
    if settings.agent_reflection is not None:
        return settings.agent_reflection
    return (config is not None and config.reflection) or isinstance(model, TierModel)


def _model(serving: ServingConfig, replay: Path | None) -> AgentModel:
    if replay is not None:
        return RecordedModel.from_file(replay, profiles_from_serving(serving)["large"])
    return TierModel(serving, "large")


def _catalog(tables: Mapping[str, str | Path] | None, settings: Settings, serving: ServingConfig) -> CatalogView:
    """Files named by the caller, else the LanceDB catalog under ``Settings.catalog_path``."""
    if tables:
        return SourceCatalog.from_paths(tables)
    from semray.catalog.store import Catalog
    from semray.planner.agents.catalog_adapter import LanceCatalogView

    # The folder alone proves nothing (the memory table lives there too): a catalog has published.
    catalog = Catalog.open(settings) if settings.catalog_path.is_dir() else None
    if catalog is None or catalog.version() == 0:
        raise AgentError(
            f"ask needs datasets to plan over and the catalog at {settings.catalog_path} has none: give "
            "tables={'name': 'file.csv'} (semray ask --table NAME=PATH), ingest some with `semray catalog add`, "
            "or pass catalog= (a CatalogView)"
        )
    return LanceCatalogView(catalog, serving.embedding)


def _memory(settings: Settings, serving: ServingConfig) -> tuple[MemoryView, Similarity]:
    """The catalog's memory table and skills' similarity under its embedding tier, which loads when memory is
    first searched or written."""
    from semray.catalog.memory import MemoryStore
    from semray.planner.agents.catalog_adapter import StoreMemory, TierEmbedding

    embedding = TierEmbedding(serving.embedding)
    return StoreMemory(MemoryStore.open(settings.catalog_path, embedding)), embedding_similarity(embedding)
