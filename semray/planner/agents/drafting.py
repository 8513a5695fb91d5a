"""The planning agent (question -> outline of operator steps) and the manipulation agent
(outline -> a complete JSON plan document).

The planning agent reads every operator's definition, generated from the IR
(``operator_docs``), the chosen datasets and retrieved knowledge. The manipulation agent reads
only the operators the outline names (and ``scan``) and only the chosen datasets, and answers
under the plan schema narrowed to those operators: enforced by the engine where the backend
decodes against a JSON schema, otherwise checked by the grammar validator.

>>> outline = outline_plan(runner, "average rating per product", profile, (), ())  # doctest: +SKIP
>>> outline.operators  # doctest: +SKIP
('scan', 'join', 'aggregate')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from semray.planner.agents.issues import PlanIssue, feedback_text
from semray.planner.agents.json_repair import JsonRepairError, decode_json
from semray.planner.agents.operator_docs import narrowed_plan_schema, operator_definitions, operator_names
from semray.planner.agents.profiling import Profile
from semray.planner.agents.prompts import PROMPTS
from semray.planner.agents.step import StepRunner
from semray.serving.contract import ModelRequest, OutputConstraint


@dataclass(frozen=True, slots=True)
class OutlineStep:
    """One step of the high-level plan: an operator, the dataset a scan reads, and why."""

    operator: str
    purpose: str
    dataset: str | None = None


@dataclass(frozen=True, slots=True)
class Outline:
    """The planning agent's high-level plan (operators the IR does not know are left out)."""

    steps: tuple[OutlineStep, ...]
    unknown: tuple[str, ...] = ()

    @property
    def operators(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(step.operator for step in self.steps))

    def text(self) -> str:
        return (
            "\n".join(
                f"{number}. {step.operator}" + (f" over {step.dataset}" if step.dataset else "") + f": {step.purpose}"
                for number, step in enumerate(self.steps, start=1)
            )
            or "none"
        )


def outline_plan(
    runner: StepRunner,
    question: str,
    profile: Profile,
    knowledge: Sequence[str],
    feedback: tuple[PlanIssue, ...],
    structured: bool = True,
) -> Outline:
    """One recorded planning step."""
    prompt = PROMPTS["outline"]
    assert prompt.output_schema is not None
    request = ModelRequest(
        prompt=prompt.render(
            question=question,
            datasets=profile.text(),
            operators=operator_definitions(),
            knowledge="\n".join(f"- {line}" for line in knowledge) or "none",
            feedback=feedback_text(feedback),
        ),
        system=prompt.system,
        constraint=OutputConstraint.schema(prompt.output_schema) if structured else OutputConstraint.text(),
        max_tokens=prompt.max_tokens,
    )
    outcome = runner.ask("planning", "outline", {"question": question}, request)
    return _outline(outcome.response.text)


def fill_plan(
    runner: StepRunner,
    question: str,
    outline: Outline,
    profile: Profile,
    hints: Sequence[str],
    previous: str,
    feedback: tuple[PlanIssue, ...],
    structured: bool = True,
) -> str:
    """One recorded manipulation step; returns the drafted plan text (validated by the caller)."""
    prompt = PROMPTS["fill"]
    # An empty outline (an unreadable planning reply) leaves every operator open.
    operators = tuple(dict.fromkeys(("scan", *outline.operators))) if outline.steps else operator_names()
    constraint = OutputConstraint.schema(narrowed_plan_schema(operators)) if structured else OutputConstraint.text()
    request = ModelRequest(
        prompt=prompt.render(
            question=question,
            outline=outline.text(),
            datasets=profile.text(),
            operators=operator_definitions(operators),
            hints="\n".join(f"- {hint}" for hint in hints) or "none",
            previous=previous or "none",
            feedback=feedback_text(feedback),
        ),
        system=prompt.system,
        constraint=constraint,
        max_tokens=prompt.max_tokens,
    )
    outcome = runner.ask("manipulation", "fill", {"question": question, "outline": outline.text()}, request)
    return outcome.response.text


def _outline(text: str) -> Outline:
    try:
        value, _ = decode_json(text)
    except JsonRepairError:
        return Outline(())
    raw = value.get("steps") if isinstance(value, dict) else None
    known = set(operator_names())
    steps: list[OutlineStep] = []
    unknown: list[str] = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        operator = str(item.get("operator", ""))
        if operator not in known:
            unknown.append(operator)
            continue
        dataset = item.get("dataset")
        steps.append(OutlineStep(operator, str(item.get("purpose", "")), str(dataset) if dataset else None))
    return Outline(tuple(steps), tuple(unknown))
