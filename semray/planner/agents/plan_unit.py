"""The plan unit and the run unit of the planning loop: draft, validate, route feedback, run.

``PlanUnit`` holds what the attempts of the plan units of one question share (the routed profile
and outline, the last failed draft, the validated plan) and gives ``UnitRunner.run`` its attempt,
validation and after-failure functions. A draft is one manipulation step, or, with sub-agents:
candidates that compete (``competition.compete``) or collaborators that repair a failed draft on
branches merged into one (``collaboration.collaborate``). Validation is the grammar validator,
span divergence (with a scorer), then the judges; the run unit executes a committed plan and, with
``LoopConfig.reflection``, has the model reflect on its answer (``reflection.py``).

>>> unit = PlanUnit(...)  # doctest: +SKIP
>>> units.run("plan", unit.draft, unit.validate, after_failure=unit.route)  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from semray.log import get_logger
from semray.operators import Node, plan_to_json
from semray.planner.agents.catalog_view import CatalogView
from semray.planner.agents.collaboration import base_document, collaborate, shares_of
from semray.planner.agents.competition import PlanCost, compete
from semray.planner.agents.confidence import Scorer
from semray.planner.agents.drafting import Outline, fill_plan, outline_plan
from semray.planner.agents.exploration import ExplorationStop
from semray.planner.agents.grammar import GrammarReport, check_plan_text
from semray.planner.agents.issues import PlanIssue
from semray.planner.agents.loop_config import LoopConfig
from semray.planner.agents.memory import MemoryManager
from semray.planner.agents.profiling import Profile, profile_question
from semray.planner.agents.reflection import Reflection, reflect
from semray.planner.agents.semantic import judge_plan
from semray.planner.agents.spans import decision_spans, score_spans, span_issue
from semray.planner.agents.step import StepRunner
from semray.planner.agents.units import UnitAttempt, Verdict

log = get_logger(__name__)

Executor = Callable[[Node], Any]
"""Runs a validated plan and returns its result; a ``SemrayError`` it raises is fed back."""


@dataclass(frozen=True, slots=True)
class Checked:
    """A draft's validation: its verdict, the grammar report, the span signals, a weak span."""

    verdict: Verdict
    report: GrammarReport
    signals: tuple[tuple[str, float], ...]
    weak: PlanIssue | None
    span_retry: bool = False

    @property
    def plan(self) -> Node | None:
        return self.report.plan


@dataclass(slots=True)
class PlanUnit:
    """The plan units of one question (and its run units): their shared state and their functions."""

    runner: StepRunner
    question: str
    catalog: CatalogView
    config: LoopConfig
    knowledge: tuple[str, ...]
    manager: MemoryManager
    profile: Profile
    outline: Outline
    price: PlanCost
    scorer: Scorer | None = None
    stop: ExplorationStop | None = None
    executor: Executor | None = None
    structured: bool = True
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
    checked: dict[str, Checked] = field(default_factory=dict)
    """The winning candidate's validation, so the unit's verdict does not validate it twice."""
    reflection: Reflection | None = None
    """What reflection said of the last run's answer (None: reflection is off, or nothing ran)."""

    def draft(self, attempt: UnitAttempt) -> str:
        """One attempt's draft: one manipulation step, competing candidates, or merged collaborators."""
        config = self.config
        context = self.manager.short.context(config.units.context_units)
        # A new plan unit after a failed run starts from the run's verdict.
        feedback = attempt.feedback or (self.carried if attempt.number == 1 else ())
        self.count += 1
        hints = [*self.knowledge, *context.hint_lines]
        shown = feedback if config.isolation else context.issues

        def fill(runner: StepRunner, issues: tuple[PlanIssue, ...], notes: list[str] = hints) -> str:
            return fill_plan(
                runner, self.question, self.outline, self.profile, notes, self.previous, issues, self.structured
            )

        def repair(runner: StepRunner, issues: tuple[PlanIssue, ...]) -> str:
            # A collaborator sees its own problems only: recalled knowledge, none of the other shares' hints.
            return fill(runner, issues, [*self.knowledge])

        shares = shares_of(feedback, config.collaborators) if config.isolation and attempt.number > 1 else ()
        base = base_document(self.previous) if shares else None
        if shares and base is not None:
            return collaborate(attempt, base, shares, repair, config.parallelism)
        if config.candidates == 1:
            return fill(self.runner, shown)
        # Competitive sub-agents: each candidate validated alone, the cheapest valid one wins; the losers'
        # drafts and verdicts go nowhere (not into later prompts, not into memory).
        text, found = compete(
            attempt, config.candidates, lambda runner: fill(runner, shown), self.check, self.price, config.parallelism
        )
        self.checked = {text: found}
        return text

    def check(self, text: str, runner: StepRunner | None = None) -> Checked:
        """Validate one draft on ``runner`` (a candidate's branch; default the loop's): grammar, spans, judges."""
        runner = runner or self.runner
        report = validate_text(runner, text, self.catalog, self.profile.names)
        issues = report.issues
        signals: tuple[tuple[str, float], ...] = ()
        weak: PlanIssue | None = None
        config = self.config
        threshold = config.units.span_divergence
        if report.plan is not None and not issues and self.scorer is not None and threshold is not None:
            evidence = _evidence(self.profile, self.knowledge)
            signals, weak = _check_spans(runner, self.scorer, self.question, evidence, report.plan, threshold)
            # One retry for weak spans, never of the last draft: a later one goes on to the judges and the run.
            if weak is not None and self.count < config.drafts and not self.span_retried:
                return Checked(Verdict((weak,), signals, soft=True), report, signals, weak, span_retry=True)
        if report.plan is not None and not issues and config.semantic:
            verdict = judge_plan(runner, self.question, report.plan, self.knowledge, config.judges, self.structured)
            issues = () if verdict.issue is None else (verdict.issue,)
        if report.plan is not None and not issues:
            return Checked(Verdict(signals=signals), report, signals, weak)
        failing = issues or (PlanIssue("plan", "the draft is not a plan", "json"),)
        return Checked(Verdict(failing, signals), report, signals, weak)

    def validate(self, text: str, attempt: UnitAttempt) -> Verdict:
        found = self.checked.pop(text, None) or self.check(text)
        self.checked = {}
        self.span_retried = self.span_retried or found.span_retry
        if found.verdict.ok and found.plan is not None:
            self.plan, self.text = found.plan, text
            if self.executor is None:
                attempt.write_file("plan.json", plan_to_json(found.plan).encode())
            self.evidence = evidence_lines(found.report, found.signals, self.config, False, None)
            self.grounded = found.weak is None
        return found.verdict

    def route(self, text: str, verdict: Verdict, attempt: UnitAttempt) -> None:
        """A failed draft's issues, by category, back to the agents that fix them."""
        config = self.config
        self.manager.short.note(verdict.issues)
        categories = {self.manager.classify(self.question, issue, self.structured) for issue in verdict.issues}
        if "data" in categories:
            self.profile = profile_question(
                self.runner,
                self.catalog,
                self.question,
                self.knowledge,
                verdict.issues,
                self.structured,
                self.stop,
                attempt,
                config.dataset_agents,
                config.parallelism,
            )
        if "semantic" in categories:
            self.outline = outline_plan(
                self.runner, self.question, self.profile, self.knowledge, verdict.issues, self.structured
            )
        self.drafts.append(text)
        # The ablation without isolation shows every failed draft, up to the context limit.
        kept = self.drafts[len(self.drafts) - config.units.context_units :]
        self.previous = text if config.isolation else "\n\n".join(kept)

    def run(self, attempt: UnitAttempt) -> tuple[Any, tuple[PlanIssue, ...]]:
        assert self.plan is not None and self.executor is not None
        return execute(self.runner, self.executor, self.plan)

    def ran(self, outcome: tuple[Any, tuple[PlanIssue, ...]], attempt: UnitAttempt) -> Verdict:
        """The run unit's verdict: the execution error, else (with reflection on) what reflection said of the answer.

        An implausible answer fails the run unit like an execution error while drafts are left; after the last
        draft it is a soft failure, so the unit commits it (forced) and the ask reports it as failing reflection.
        """
        executed, issues = outcome
        if issues:
            return Verdict(issues)
        assert self.plan is not None
        found = (
            reflect(self.runner, self.question, self.plan, executed, self.structured)
            if self.config.reflection
            else None
        )
        self.reflection = found
        issue = None if found is None else found.issue()
        signals = () if found is None or found.verdict == "unreadable" else (("reflection", 0.0 if issue else 1.0),)
        last = self.count >= self.config.drafts
        if issue is not None and not last:
            return Verdict((issue,), signals)
        self.executed = executed
        attempt.write_file("plan.json", plan_to_json(self.plan).encode())
        self.evidence = (*self.evidence, *evidence_lines(None, (), self.config, True, executed, found))
        return Verdict(signals=signals) if issue is None else Verdict((issue,), signals, soft=True)

    def failed_run(self, outcome: tuple[Any, tuple[PlanIssue, ...]], verdict: Verdict, attempt: UnitAttempt) -> None:
        self.route(self.text, verdict, attempt)


def evidence_lines(
    report: GrammarReport | None,
    signals: tuple[tuple[str, float], ...],
    config: LoopConfig,
    ran: bool,
    executed: Any,
    reflection: Reflection | None = None,
) -> tuple[str, ...]:
    """What a validated plan passed, kept with its skill: the checks, the signals, the run, the reflection."""
    lines = []
    if report is not None:
        lines.append("grammar: valid" + (f" after repairs ({'; '.join(report.repairs)})" if report.repairs else ""))
        lines.extend(f"{name} {value:.3f}" for name, value in signals)
        if config.semantic:
            lines.append(f"judges: a majority of {config.judges} accepted")
    if ran:
        rows = getattr(getattr(executed, "table", None), "num_rows", None)
        lines.append("ran" + (f": {rows} rows" if rows is not None else ""))
    if reflection is not None:
        lines.append(reflection.line())
    return tuple(lines)


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


def validate_text(runner: StepRunner, text: str, catalog: CatalogView, datasets: tuple[str, ...]) -> GrammarReport:
    """The grammar validator as one recorded step (a skill's plan is validated with it too)."""
    reports: list[GrammarReport] = []

    def work() -> tuple[str, str | None]:
        reports.append(check_plan_text(text, catalog, datasets))
        report = reports[0]
        repaired = f" (repaired: {'; '.join(report.repairs)})" if report.repairs else ""
        problems = "\n".join(issue.line() for issue in report.issues)
        return ("valid" + repaired) if report.ok else problems, None if report.ok else problems

    runner.run("grammar", "validate", {"plan": text}, work)
    return reports[0]


def execute(runner: StepRunner, executor: Executor, plan: Node) -> tuple[Any, tuple[PlanIssue, ...]]:
    """Run a plan as one recorded step; a ``SemrayError`` becomes the issue fed back."""
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
