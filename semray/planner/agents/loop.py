"""The planning loop: profile -> outline -> draft -> validate -> feed back -> repair, bounded.

Validation is the grammar validator, then the semantic judges, then (when an executor is given)
running the plan; the first that finds problems ends the iteration. Each problem is classified
and routed: data problems send the profiling agent back to the data, semantic ones send the
planning agent back to the outline, and every problem reaches the manipulation agent's next
draft as feedback. After the last iteration, or success, the memory manager consolidates.

>>> result = plan_question("average rating per product", catalog=catalog, model=model)  # doctest: +SKIP
>>> result.iterations  # doctest: +SKIP
1
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from semray.log import get_logger
from semray.operators import Node, plan_to_json
from semray.planner.agents.catalog_view import CatalogView, MemoryView
from semray.planner.agents.drafting import fill_plan, outline_plan
from semray.planner.agents.errors import PlanningFailedError
from semray.planner.agents.grammar import GrammarReport, check_plan_text
from semray.planner.agents.issues import PlanIssue
from semray.planner.agents.memory import MemoryManager
from semray.planner.agents.models import AgentModel
from semray.planner.agents.profiling import profile_question
from semray.planner.agents.semantic import judge_plan
from semray.planner.agents.step import StepRunner, Trace

log = get_logger(__name__)

Executor = Callable[[Node], Any]
"""Runs a validated plan and returns its result; a ``SemrayError`` it raises is fed back."""


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """Bounds and switches of the loop (the switches serve the ablations of ``benchmarks/planning.py``)."""

    max_iterations: int = 4
    judges: int = 3
    semantic: bool = True
    memory: bool = True


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
) -> PlanningResult:
    """Plan (and, with ``executor``, run) a question; raises PlanningFailedError past the bound."""
    runner = runner or StepRunner(model)
    structured = model.structured_output
    manager = MemoryManager(runner, memory if config.memory else None)
    try:
        knowledge = manager.recall(question)
        profile = profile_question(runner, catalog, question, knowledge, structured=structured)
        outline = outline_plan(runner, question, profile, knowledge, (), structured)
        previous, feedback = "", tuple[PlanIssue, ...]()
        for iteration in range(1, config.max_iterations + 1):
            text = fill_plan(
                runner, question, outline, profile, [*knowledge, *manager.short.hints], previous, feedback, structured
            )
            report = _validate(runner, text, catalog, profile.names)
            issues = report.issues
            if report.plan is not None and not issues and config.semantic:
                verdict = judge_plan(runner, question, report.plan, knowledge, config.judges, structured)
                issues = () if verdict.issue is None else (verdict.issue,)
            executed: Any = None
            if report.plan is not None and not issues and executor is not None:
                executed, issues = _execute(runner, executor, report.plan)
            if report.plan is not None and not issues:
                log.info("question_planned", iterations=iteration, steps=len(runner.trace.steps))
                return PlanningResult(
                    report.plan,
                    plan_to_json(report.plan),
                    profile.names,
                    iteration,
                    runner.trace,
                    tuple(manager.short.issues),
                    executed,
                )
            manager.short.note(issues)
            categories = {manager.classify(question, issue, structured) for issue in issues}
            if "data" in categories:
                profile = profile_question(runner, catalog, question, knowledge, issues, structured)
            if "semantic" in categories:
                outline = outline_plan(runner, question, profile, knowledge, issues, structured)
            previous, feedback = text, issues
        last = tuple(issue.line() for issue in feedback)
        raise PlanningFailedError(
            f"no valid plan after {config.max_iterations} drafts; the last one had: "
            + " ".join(last)
            + " (rephrase the question, name the datasets, or raise max_iterations)",
            last,
        )
    finally:
        manager.consolidate(question, run_id)


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
        return "ran", None

    runner.run("execution", "run", {"plan": plan_to_json(plan, indent=None)}, work)
    return (results[0] if results else None), tuple(failures)
