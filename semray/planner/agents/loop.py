"""The planning loop: profile -> outline -> draft -> validate -> feed back -> repair, bounded.

Validation is the grammar validator, then the semantic judges, then (when an executor is given)
running the plan and, with ``LoopConfig.reflection``, the model's reflection on its answer
(``reflection.py``: an answer kept after the last draft although it failed reflection ends the ask
``unverified``, never as a clean success); the first that finds problems ends the iteration. Each problem is classified
and routed: data problems send the profiling agent back to the data, semantic ones send the
planning agent back to the outline, and every problem reaches the manipulation agent's next
draft as feedback. After the last iteration, or success, the memory manager consolidates, and a
plan that was validated and ran is stored as a skill; a later question a skill fits reuses it,
validated again, instead of being planned (``skills.py``). The plan and run units themselves are
``plan_unit.py``; sub-agents (candidates, collaborators, dataset sub-agents) are switched on by
``LoopConfig`` (``loop_config.py``).

>>> result = plan_question("average rating per product", catalog=catalog, model=model)  # doctest: +SKIP
>>> result.iterations  # doctest: +SKIP
1
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from semray.log import get_logger
from semray.operators import Node, plan_to_json
from semray.planner.agents.ask_journal import AskTrace
from semray.planner.agents.catalog_view import CatalogView, MemoryView
from semray.planner.agents.competition import PlanCost, default_cost
from semray.planner.agents.confidence import Scorer, decision_divergence
from semray.planner.agents.drafting import outline_plan
from semray.planner.agents.errors import PlanningFailedError
from semray.planner.agents.exploration import ExplorationStop
from semray.planner.agents.issues import PlanIssue
from semray.planner.agents.journaled_scorer import JournaledScorer
from semray.planner.agents.loop_config import LoopConfig
from semray.planner.agents.memory import MemoryManager
from semray.planner.agents.models import AgentModel
from semray.planner.agents.plan_unit import Executor, PlanUnit, execute, validate_text
from semray.planner.agents.profiling import Profile, profile_question
from semray.planner.agents.reflection import Reflection, reflect
from semray.planner.agents.semantic import judge_plan
from semray.planner.agents.skills import Similarity, SkillBook, SkillMatch, catalog_values, lexical_similarity
from semray.planner.agents.step import StepRunner, Trace
from semray.planner.agents.units import StagedMemory, UnitAttempt, UnitFailedError, UnitRunner, Verdict

log = get_logger(__name__)
DEFAULTS = LoopConfig()

__all__ = ["Executor", "LoopConfig", "PlanningResult", "plan_question"]


@dataclass(frozen=True, slots=True)
class PlanningResult:
    """A validated plan, the datasets it reads, what executing it gave, and every step taken."""

    plan: Node
    plan_json: str
    datasets: tuple[str, ...]
    iterations: int
    trace: Trace
    issues: tuple[PlanIssue, ...]
    executed: Any = None
    skill: str | None = None
    """The question of the stored skill this plan was taken from (None: planned)."""
    reflection: Reflection | None = None
    """What reflection said of the answer (None: off, or no run); ``failed``: the answer was kept after the last
    draft although it failed reflection, and must be reported so."""


def plan_question(
    question: str,
    *,
    catalog: CatalogView,
    model: AgentModel,
    memory: MemoryView | None = None,
    config: LoopConfig = DEFAULTS,
    executor: Executor | None = None,
    runner: StepRunner | None = None,
    run_id: str | None = None,
    trace: AskTrace | None = None,
    scorer: Scorer | None = None,
    similarity: Similarity | None = None,
    cost: PlanCost | None = None,
) -> PlanningResult:
    """Plan (and, with ``executor``, run) a question; raises PlanningFailedError past the bound.

    The work is commit-or-retry units (``units.py``): recall, profile, outline, plan (one attempt
    per draft, at most ``config.drafts``, the retry limit of every unit), with ``executor`` a run
    unit (a failed run feeds a new plan unit; all plan units draft ``config.drafts`` at most), and
    consolidate;
    when a stored skill fits the question (recall finds it) a ``skill`` unit validates its plan
    first and, when it passes, is the whole planning (a failed one is demoted). With ``trace`` they are journaled
    and a resumed ask replays its committed units; with ``scorer`` the dataset choice is checked
    by decision confidence divergence, exploration stops early once a candidate adds little, and
    a draft is checked by span divergence (``spans.py``). Prompts show the verdicts of the newest
    ``UnitPolicy.context_units`` failed attempts; older ones are summarised in one line. A skill of a
    question of other words is found by ``similarity`` (default ``lexical_similarity``). With
    ``config.candidates`` > 1 each plan attempt drafts that many candidates at once, priced by ``cost``
    (default: the cost model at the planner's tier), the cheapest valid one wins; with
    ``config.collaborators`` > 1 a repair of problems at several places is shared among collaborators
    whose branches are merged; with ``config.dataset_agents`` > 0 a sub-agent per candidate dataset
    profiles it.
    """
    runner = runner or StepRunner(model)
    structured = model.structured_output
    staged = StagedMemory(memory) if memory is not None and config.memory and config.isolation else None
    manager = MemoryManager(runner, staged if config.isolation else memory if config.memory else None)
    units = UnitRunner(runner, config.units, trace, staged)
    if scorer is not None and trace is not None:
        scorer = JournaledScorer(scorer, units)  # journaled per unit; a replayed unit's texts are not scored again
    stopping = config.units.stop_divergence
    stop = None if scorer is None or stopping is None else ExplorationStop(scorer, stopping)
    alike = similarity or lexical_similarity
    book = (
        SkillBook(runner, manager.store, alike, config.skill_similarity, catalog_values(catalog))
        if config.skills and manager.store is not None
        else None
    )
    learnt: list[Callable[[], None]] = []
    finished: Literal["succeeded", "failed", "unverified"] | None = None
    message: str | None = None
    try:
        knowledge, skill = units.run(
            "recall",
            lambda _: (manager.recall(question), None if book is None else book.find(question)),
            _passes,
        ).value
        if book is not None and skill is not None:
            match, skills = skill, book

            def reuse(attempt: UnitAttempt) -> PlanningResult | None:
                return _reuse(
                    runner, skills, match, catalog, question, knowledge, config, executor, attempt, structured
                )

            reused = units.run("skill", reuse, _passes).value
            if reused is not None:
                finished = "succeeded"
                return reused
        profile = units.run(
            "profile",
            lambda attempt: profile_question(
                runner,
                catalog,
                question,
                knowledge,
                attempt.feedback,
                structured,
                stop,
                attempt,
                config.dataset_agents,
                config.parallelism,
            ),
            lambda found, _: _check_decision(scorer, question, found, config.units.decision_margin),
        ).value
        outline = units.run(
            "outline", lambda _: outline_plan(runner, question, profile, knowledge, (), structured), _passes
        ).value
        unit = PlanUnit(
            runner,
            question,
            catalog,
            config,
            knowledge,
            manager,
            profile,
            outline,
            cost or default_cost(model.profile),
            scorer,
            stop,
            executor,
            structured,
        )
        # Planning and running are units of their own: a plan unit commits a validated plan (so an ask killed
        # while the plan runs resumes without drafting it again), then a run unit executes it. A failed run sends
        # its verdict to a new plan unit; the drafts of all plan units together are at most ``config.drafts``.
        last: tuple[PlanIssue, ...] = ()
        while True:
            left = config.drafts - unit.count
            if left < 1:
                finished = "failed"
                raise _planning_failed(config.drafts, last)
            try:
                units.run("plan", unit.draft, unit.validate, max_attempts=left, after_failure=unit.route)
            except UnitFailedError as failed:
                finished = "failed"
                raise _planning_failed(config.drafts, failed.issues) from None
            if executor is None:
                break
            try:
                units.run("run", unit.run, unit.ran, max_attempts=1, after_failure=unit.failed_run)
                break
            except UnitFailedError as failed:
                last = unit.carried = failed.issues
                unit.plan = None
        assert unit.plan is not None  # a committed plan unit set it
        log.info("question_planned", iterations=unit.count, steps=len(runner.trace.steps))
        finished = "succeeded"
        reflection = unit.reflection
        if reflection is not None and reflection.failed:
            # Kept after the last draft: the ask reports it loudly and stores no skill of it.
            finished, message = "unverified", f"the answer failed reflection: {reflection.reason}"
            log.warning("answer_failed_reflection", reason=reflection.reason, drafts=unit.count)
        elif book is not None and executor is not None and unit.grounded:
            document = json.loads(plan_to_json(unit.plan))
            names, evidence = unit.profile.names, unit.evidence
            learnt.append(lambda: book.remember(question, document, names, evidence, run_id))
        return PlanningResult(
            unit.plan,
            plan_to_json(unit.plan),
            unit.profile.names,
            unit.count,
            runner.trace,
            tuple(manager.short.issues),
            unit.executed,
            reflection=reflection,
        )
    finally:
        # Only an ask that ended consolidates: one stopped by a crash, a budget or a model error resumes and
        # consolidates then, once (consolidating now too would write its lessons to long-term memory twice).
        if finished is not None:
            units.run("consolidate", lambda _: _consolidate(manager, question, run_id, learnt), _passes)
        if trace is not None and finished is not None:
            trace.finish(finished, message)  # a crash leaves the trace unfinished: the same ask resumes it


def _reuse(
    runner: StepRunner,
    book: SkillBook,
    skill: SkillMatch,
    catalog: CatalogView,
    question: str,
    knowledge: tuple[str, ...],
    config: LoopConfig,
    executor: Executor | None,
    attempt: UnitAttempt,
    structured: bool = True,
) -> PlanningResult | None:
    """Validate (and run) a skill's rebound plan like a draft; one that fails is demoted (None: plan anew)."""
    from semray.errors import SemrayError

    try:
        report = validate_text(runner, skill.plan_text, catalog, skill.datasets)
    except SemrayError as error:  # a dataset the skill reads is gone
        book.demote(skill, f"{type(error).__name__}: {error}")
        return None
    issues = report.issues
    if report.plan is not None and not issues and config.semantic:
        verdict = judge_plan(runner, question, report.plan, knowledge, config.judges, structured)
        issues = () if verdict.issue is None else (verdict.issue,)
    executed: Any = None
    reflection: Reflection | None = None
    if report.plan is not None and not issues and executor is not None:
        executed, issues = execute(runner, executor, report.plan)
        if not issues and config.reflection:
            # A reused plan's answer is reflected on like a planned one's; an implausible one demotes the skill.
            reflection = reflect(runner, question, report.plan, executed, structured)
            failed = reflection.issue()
            issues = () if failed is None else (failed,)
    if report.plan is None or issues:
        book.demote(skill, " ".join(issue.line() for issue in issues) or "the skill's plan does not load")
        return None
    attempt.write_file("plan.json", plan_to_json(report.plan).encode())
    log.info("question_planned_from_skill", skill=skill.memory_id, steps=len(runner.trace.steps))
    return PlanningResult(
        report.plan,
        plan_to_json(report.plan),
        skill.datasets,
        0,
        runner.trace,
        (),
        executed,
        skill.question,
        reflection,
    )


def _consolidate(manager: MemoryManager, question: str, run_id: str | None, learnt: list[Callable[[], None]]) -> None:
    manager.consolidate(question, run_id)
    for remember in learnt:
        remember()


def _planning_failed(drafts: int, issues: tuple[PlanIssue, ...]) -> PlanningFailedError:
    last = tuple(issue.line() for issue in issues)
    return PlanningFailedError(
        f"no valid plan after {drafts} drafts; the last one had: "
        + " ".join(last)
        + " (rephrase the question, name the datasets, or raise agent_max_retries)",
        last,
    )


def _passes(_value: object, _attempt: UnitAttempt) -> Verdict:
    """Validation of a unit with nothing to check (recall, outline, consolidate)."""
    return Verdict()


def _check_decision(scorer: Scorer | None, question: str, profile: Profile, margin: float) -> Verdict:
    """Decision confidence divergence of the dataset choice against the other search hits."""
    alternatives = tuple(name for name in profile.candidates if name not in profile.names)
    if scorer is None or not alternatives or not profile.names:
        return Verdict()
    context = (
        f"Question: {question}\nCandidate datasets: {', '.join(profile.candidates)}\n"
        f"Reason: {profile.reason or 'none'}\nDatasets to use:"
    )
    score = decision_divergence(
        scorer, context, " " + ", ".join(profile.names), tuple(f" {name}" for name in alternatives)
    )
    signals = (("decision_margin", score.margin), ("decision_confidence", score.chosen_confidence))
    if score.margin >= margin:
        return Verdict(signals=signals)
    issue = PlanIssue(
        "datasets",
        f"the dataset choice is weakly supported: {score.evidence()}, below the margin {margin:.2f}",
        "table",
        "re-read the candidates' columns and samples and choose the datasets the question needs",
    )
    log.info("decision_divergence_low", margin=score.margin, threshold=margin, chosen=profile.names)
    return Verdict((issue,), signals, soft=True)
