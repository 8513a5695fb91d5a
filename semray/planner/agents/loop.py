"""The planning loop: profile -> outline -> draft -> validate -> feed back -> repair, bounded.

Validation is the grammar validator, then the semantic judges, then (when an executor is given)
running the plan; the first that finds problems ends the iteration. Each problem is classified
and routed: data problems send the profiling agent back to the data, semantic ones send the
planning agent back to the outline, and every problem reaches the manipulation agent's next
draft as feedback. After the last iteration, or success, the memory manager consolidates, and a
plan that was validated and ran is stored as a skill; a later question a skill fits reuses it,
validated again, instead of being planned (``skills.py``).

>>> result = plan_question("average rating per product", catalog=catalog, model=model)  # doctest: +SKIP
>>> result.iterations  # doctest: +SKIP
1
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from semray.log import get_logger
from semray.operators import Node, plan_to_json
from semray.planner.agents.ask_journal import AskTrace
from semray.planner.agents.catalog_view import CatalogView, MemoryView
from semray.planner.agents.competition import UNPRICED, Candidate, PlanCost, default_cost, pick
from semray.planner.agents.confidence import Scorer, decision_divergence
from semray.planner.agents.drafting import Outline, fill_plan, outline_plan
from semray.planner.agents.errors import PlanningFailedError, RetryLimitError
from semray.planner.agents.exploration import ExplorationStop
from semray.planner.agents.grammar import GrammarReport, check_plan_text
from semray.planner.agents.issues import PlanIssue
from semray.planner.agents.memory import MemoryManager
from semray.planner.agents.models import AgentModel
from semray.planner.agents.profiling import Profile, profile_question
from semray.planner.agents.semantic import judge_plan
from semray.planner.agents.skills import SIMILARITY, Similarity, SkillBook, SkillMatch, lexical_similarity
from semray.planner.agents.spans import decision_spans, score_spans, span_issue
from semray.planner.agents.step import StepRunner, Trace
from semray.planner.agents.units import StagedMemory, UnitAttempt, UnitFailedError, UnitPolicy, UnitRunner, Verdict

log = get_logger(__name__)

Executor = Callable[[Node], Any]
"""Runs a validated plan and returns its result; a ``SemrayError`` it raises is fed back."""


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """Bounds and switches of the loop (the switches serve the ablations of ``benchmarks/planning.py``)."""

    max_iterations: int | None = None
    """Drafts of the plan unit; None: as many as any unit's attempts (``units.max_retries`` + 1). More than
    that is refused: the plan unit honours the retry limit like every other unit."""
    judges: int = 3
    semantic: bool = True
    memory: bool = True
    units: UnitPolicy = field(default_factory=UnitPolicy)
    isolation: bool = True
    """A draft sees only the last failed draft and its verdict; False (an ablation): every failed draft and
    every issue so far stay in later prompts, and memory writes are not staged behind commits."""
    skills: bool = True
    """With long-term memory, a plan that was validated and ran is stored as a skill and a question it fits
    reuses it (``skills.py``) instead of being planned."""
    candidates: int = 1
    """Competitive sub-agents (``competition.py``): drafts per attempt of the plan unit, each from an isolated
    context and validated alone; the cheapest valid one by the cost model wins. 1: one draft."""
    skill_similarity: float = SIMILARITY
    """How alike a question of other words must be to a skill's question for the skill to be re-filled for it."""

    def __post_init__(self) -> None:
        if self.candidates < 1:
            raise RetryLimitError(f"candidates is {self.candidates}; the plan unit drafts at least 1 per attempt")
        attempts = self.units.max_retries + 1
        if self.max_iterations is not None and not 1 <= self.max_iterations <= attempts:
            raise RetryLimitError(
                f"max_iterations {self.max_iterations} is outside 1..{attempts}: a unit makes at most "
                f"max_retries + 1 = {attempts} attempts; raise agent_max_retries (SEMRAY_AGENT_MAX_RETRIES) for more"
            )

    @property
    def drafts(self) -> int:
        """How many drafts the plan unit may make: ``max_iterations``, else the units' retry limit + 1."""
        return self.units.max_retries + 1 if self.max_iterations is None else self.max_iterations


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


def plan_question(
    question: str,
    *,
    catalog: CatalogView,
    model: AgentModel,
    memory: MemoryView | None = None,
    config: LoopConfig = LoopConfig(),
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
    ``config.candidates`` > 1 each plan attempt drafts that many candidates, priced by ``cost``
    (default: the cost model at the planner's tier), the cheapest valid one wins.
    """
    runner = runner or StepRunner(model)
    structured = model.structured_output
    staged = StagedMemory(memory) if memory is not None and config.memory and config.isolation else None
    manager = MemoryManager(runner, staged if config.isolation else memory if config.memory else None)
    units = UnitRunner(runner, config.units, trace, staged)
    stopping = config.units.stop_divergence
    stop = None if scorer is None or stopping is None else ExplorationStop(scorer, stopping)
    alike = similarity or lexical_similarity
    price = cost or default_cost(model.profile)
    book = (
        SkillBook(runner, manager.store, alike, config.skill_similarity)
        if config.skills and manager.store is not None
        else None
    )
    learnt: list[Callable[[], None]] = []
    finished: Literal["succeeded", "failed"] | None = None
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
            lambda attempt: profile_question(runner, catalog, question, knowledge, attempt.feedback, structured, stop),
            lambda found, _: _check_decision(scorer, question, found, config.units.decision_margin),
        ).value
        drafting = _Drafting(
            profile,
            units.run(
                "outline", lambda _: outline_plan(runner, question, profile, knowledge, (), structured), _passes
            ).value,
        )

        def draft(attempt: UnitAttempt) -> str:
            context = manager.short.context(config.units.context_units)
            # A new plan unit after a failed run starts from the run's verdict.
            feedback = attempt.feedback or (drafting.carried if attempt.number == 1 else ())
            drafting.count += 1
            texts = [
                fill_plan(
                    runner,
                    question,
                    drafting.outline,
                    drafting.profile,
                    [*knowledge, *context.hint_lines],
                    drafting.previous,
                    feedback if config.isolation else context.issues,
                    structured,
                )
                for _ in range(config.candidates)
            ]
            if len(texts) == 1:
                return texts[0]
            # Competitive sub-agents: each candidate validated alone, the cheapest valid one wins; the losers'
            # drafts and verdicts go nowhere (not into later prompts, not into memory).
            checks = [check(text) for text in texts]
            candidates = [
                Candidate(text, found.verdict.ok, price(found.plan) if found.verdict.ok and found.plan else UNPRICED)
                for text, found in zip(texts, checks, strict=True)
            ]
            winner = pick(candidates)
            chosen = texts.index(winner.text) if winner is not None else 0
            drafting.checked = {texts[chosen]: checks[chosen]}
            log.info(
                "candidate_chosen",
                candidates=len(texts),
                valid=sum(candidate.ok for candidate in candidates),
                chosen=chosen,
                cost=None if winner is None else winner.cost[0],
            )
            return texts[chosen]

        def check(text: str) -> _Checked:
            report = _validate(runner, text, catalog, drafting.profile.names)
            issues = report.issues
            signals: tuple[tuple[str, float], ...] = ()
            weak: PlanIssue | None = None
            threshold = config.units.span_divergence
            if report.plan is not None and not issues and scorer is not None and threshold is not None:
                evidence = _evidence(drafting.profile, knowledge)
                signals, weak = _check_spans(runner, scorer, question, evidence, report.plan, threshold)
                # One retry for weak spans, never of the last draft: a later one goes on to the judges and the run.
                if weak is not None and drafting.count < config.drafts and not drafting.span_retried:
                    return _Checked(Verdict((weak,), signals, soft=True), report, signals, weak, span_retry=True)
            if report.plan is not None and not issues and config.semantic:
                verdict = judge_plan(runner, question, report.plan, knowledge, config.judges, structured)
                issues = () if verdict.issue is None else (verdict.issue,)
            if report.plan is not None and not issues:
                return _Checked(Verdict(signals=signals), report, signals, weak)
            failing = issues or (PlanIssue("plan", "the draft is not a plan", "json"),)
            return _Checked(Verdict(failing, signals), report, signals, weak)

        def validate(text: str, attempt: UnitAttempt) -> Verdict:
            found = drafting.checked.pop(text, None) or check(text)
            drafting.checked = {}
            drafting.span_retried = drafting.span_retried or found.span_retry
            if found.verdict.ok and found.plan is not None:
                drafting.plan, drafting.text = found.plan, text
                if executor is None:
                    attempt.write_file("plan.json", plan_to_json(found.plan).encode())
                drafting.evidence = _evidence_lines(found.report, found.signals, config, False, None)
                drafting.grounded = found.weak is None
            return found.verdict

        def route(text: str, verdict: Verdict, _: UnitAttempt) -> None:
            manager.short.note(verdict.issues)
            categories = {manager.classify(question, issue, structured) for issue in verdict.issues}
            if "data" in categories:
                drafting.profile = profile_question(
                    runner, catalog, question, knowledge, verdict.issues, structured, stop
                )
            if "semantic" in categories:
                drafting.outline = outline_plan(
                    runner, question, drafting.profile, knowledge, verdict.issues, structured
                )
            drafting.drafts.append(text)
            # The ablation without isolation shows every failed draft, up to the context limit.
            kept = drafting.drafts[len(drafting.drafts) - config.units.context_units :]
            drafting.previous = text if config.isolation else "\n\n".join(kept)

        def run(attempt: UnitAttempt) -> tuple[Any, tuple[PlanIssue, ...]]:
            assert drafting.plan is not None and executor is not None
            return _execute(runner, executor, drafting.plan)

        def ran(outcome: tuple[Any, tuple[PlanIssue, ...]], attempt: UnitAttempt) -> Verdict:
            executed, issues = outcome
            if issues:
                return Verdict(issues)
            assert drafting.plan is not None
            drafting.executed = executed
            attempt.write_file("plan.json", plan_to_json(drafting.plan).encode())
            drafting.evidence = (*drafting.evidence, *_evidence_lines(None, (), config, True, executed))
            return Verdict()

        def failed_run(outcome: tuple[Any, tuple[PlanIssue, ...]], verdict: Verdict, attempt: UnitAttempt) -> None:
            route(drafting.text, verdict, attempt)

        # Planning and running are units of their own: a plan unit commits a validated plan (so an ask killed
        # while the plan runs resumes without drafting it again), then a run unit executes it. A failed run sends
        # its verdict to a new plan unit; the drafts of all plan units together are at most ``config.drafts``.
        last: tuple[PlanIssue, ...] = ()
        while True:
            left = config.drafts - drafting.count
            if left < 1:
                finished = "failed"
                raise _planning_failed(config.drafts, last)
            try:
                units.run("plan", draft, validate, max_attempts=left, after_failure=route)
            except UnitFailedError as failed:
                finished = "failed"
                raise _planning_failed(config.drafts, failed.issues) from None
            if executor is None:
                break
            try:
                units.run("run", run, ran, max_attempts=1, after_failure=failed_run)
                break
            except UnitFailedError as failed:
                last = drafting.carried = failed.issues
                drafting.plan = None
        assert drafting.plan is not None  # a committed plan unit set it
        log.info("question_planned", iterations=drafting.count, steps=len(runner.trace.steps))
        finished = "succeeded"
        if book is not None and executor is not None and drafting.grounded:
            document = json.loads(plan_to_json(drafting.plan))
            names, evidence = drafting.profile.names, drafting.evidence
            learnt.append(lambda: book.remember(question, document, names, evidence, run_id))
        return PlanningResult(
            drafting.plan,
            plan_to_json(drafting.plan),
            drafting.profile.names,
            drafting.count,
            runner.trace,
            tuple(manager.short.issues),
            drafting.executed,
        )
    finally:
        # Only an ask that ended consolidates: one stopped by a crash, a budget or a model error resumes and
        # consolidates then, once (consolidating now too would write its lessons to long-term memory twice).
        if finished is not None:
            units.run("consolidate", lambda _: _consolidate(manager, question, run_id, learnt), _passes)
        if trace is not None and finished is not None:
            trace.finish(finished)  # a crash leaves the trace unfinished: the same ask resumes it


@dataclass(slots=True)
class _Drafting:
    """What the plan unit's attempts share: the routed profile and outline, the last draft, the result."""

    profile: Profile
    outline: Outline
    previous: str = ""
    drafts: list[str] = field(default_factory=list)
    plan: Node | None = None
    executed: Any = None
    evidence: tuple[str, ...] = ()
    grounded: bool = True
    span_retried: bool = False
    count: int = 0
    """Drafts made so far, over every plan unit."""
    text: str = ""
    """The validated draft's text (what a failed run's feedback routes as the last draft)."""
    carried: tuple[PlanIssue, ...] = ()
    """A failed run's issues: the next plan unit's first feedback."""
    checked: dict[str, _Checked] = field(default_factory=dict)
    """The winning candidate's validation, so the unit's verdict does not validate it twice."""


@dataclass(frozen=True, slots=True)
class _Checked:
    """A draft's validation: its verdict, the grammar report, the span signals, a weak span."""

    verdict: Verdict
    report: GrammarReport
    signals: tuple[tuple[str, float], ...]
    weak: PlanIssue | None
    span_retry: bool = False

    @property
    def plan(self) -> Node | None:
        return self.report.plan


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
        report = _validate(runner, skill.plan_text, catalog, skill.datasets)
    except SemrayError as error:  # a dataset the skill reads is gone
        book.demote(skill, f"{type(error).__name__}: {error}")
        return None
    issues = report.issues
    if report.plan is not None and not issues and config.semantic:
        verdict = judge_plan(runner, question, report.plan, knowledge, config.judges, structured)
        issues = () if verdict.issue is None else (verdict.issue,)
    executed: Any = None
    if report.plan is not None and not issues and executor is not None:
        executed, issues = _execute(runner, executor, report.plan)
    if report.plan is None or issues:
        book.demote(skill, " ".join(issue.line() for issue in issues) or "the skill's plan does not load")
        return None
    attempt.write_file("plan.json", plan_to_json(report.plan).encode())
    log.info("question_planned_from_skill", skill=skill.memory_id, steps=len(runner.trace.steps))
    return PlanningResult(
        report.plan, plan_to_json(report.plan), skill.datasets, 0, runner.trace, (), executed, skill.question
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


def _evidence_lines(
    report: GrammarReport | None, signals: tuple[tuple[str, float], ...], config: LoopConfig, ran: bool, executed: Any
) -> tuple[str, ...]:
    """What a validated plan passed, kept with its skill: the checks, the signals, the run."""
    lines = []
    if report is not None:
        lines.append("grammar: valid" + (f" after repairs ({'; '.join(report.repairs)})" if report.repairs else ""))
        lines.extend(f"{name} {value:.3f}" for name, value in signals)
        if config.semantic:
            lines.append(f"judges: a majority of {config.judges} accepted")
    if ran:
        rows = getattr(getattr(executed, "table", None), "num_rows", None)
        lines.append("ran" + (f": {rows} rows" if rows is not None else ""))
    return tuple(lines)


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


def _check_spans(
    runner: StepRunner,
    scorer: Scorer,
    question: str,
    evidence: str,
    plan: Node,
    threshold: float,
) -> tuple[tuple[tuple[str, float], ...], PlanIssue | None]:
    """Span divergence of a grammatical draft (one recorded step): its signals and the retry's issue, if any."""
    found: list[tuple[tuple[tuple[str, float], ...], PlanIssue | None]] = []

    def work() -> tuple[str, str | None]:
        document = json.loads(plan_to_json(plan, indent=None))
        report = score_spans(scorer, question, evidence, decision_spans(document["plan"]))
        issue = span_issue(report, threshold)
        largest = report.largest
        found.append(((("span_divergence", largest),) if largest is not None else (), issue))
        lines = [score.line() for score in report.scores] or ["no decision spans"]
        if issue is not None:
            log.info("span_divergence_low", largest=largest, threshold=threshold)
        return "\n".join(lines), None if issue is None else issue.message

    runner.run("semantic", "spans", {"threshold": f"{threshold:.2f}"}, work)
    return found[0]


def _evidence(profile: Profile, knowledge: tuple[str, ...]) -> str:
    """What exploration found, as the span scorer's context: datasets, domain notes, recalled knowledge."""
    notes = [f"- [{segment.dataset}] {segment.text[:300]}" for segment in profile.segments]
    parts = [profile.text(), *(["Domain notes:", *notes] if notes else [])]
    if knowledge:
        parts.extend(["What earlier tasks taught:", *(f"- {line}" for line in knowledge)])
    return "\n".join(parts)


def _validate(runner: StepRunner, text: str, catalog: CatalogView, datasets: tuple[str, ...]) -> GrammarReport:
    reports: list[GrammarReport] = []

    def work() -> tuple[str, str | None]:
        reports.append(check_plan_text(text, catalog, datasets))
        report = reports[0]
        repaired = f" (repaired: {'; '.join(report.repairs)})" if report.repairs else ""
        problems = "\n".join(issue.line() for issue in report.issues)
        return ("valid" + repaired) if report.ok else problems, None if report.ok else problems

    runner.run("grammar", "validate", {"plan": text}, work)
    return reports[0]


def _execute(runner: StepRunner, executor: Executor, plan: Node) -> tuple[Any, tuple[PlanIssue, ...]]:
    from semray.errors import SemrayError

    results: list[Any] = []
    failures: list[PlanIssue] = []

    def work() -> tuple[str, str | None]:
        try:
            results.append(executor(plan))
        except SemrayError as error:
            failures.append(PlanIssue("plan", f"{type(error).__name__}: {error}", "execution"))
            return "failed", failures[0].message
        ran = getattr(results[0], "run_id", None)
        return ("ran" if ran is None else f"ran: run {ran}"), None  # the run id, journaled with the ask

    runner.run("execution", "run", {"plan": plan_to_json(plan, indent=None)}, work)
    return (results[0] if results else None), tuple(failures)
