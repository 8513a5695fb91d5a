"""Task prompts of the row-wise semantic operators, as versioned data.

An operator's instruction (with its ``{column}`` cells rendered) goes into ``{instruction}``;
the serving layer then adds how to answer (``formats.py``). The response cache is keyed
on the rendered prompt, so changing a template here invalidates cached answers by itself;
``OPERATOR_PROMPT_VERSION`` names the template set in logs and journals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from semray.serving.contract import ModelRequest, OutputConstraint
from semray.serving.prompts.render import render_prompt
from semray.tasks import Question, TaskKind

OPERATOR_PROMPT_VERSION = "operator-prompts/2"

JSON_TYPES = {"text": "string", "int": "integer", "float": "number", "bool": "boolean", "date": "string"}


@dataclass(frozen=True, slots=True)
class TaskPrompt:
    """System text and a user template for one kind of semantic task."""

    system: str
    user: str
    max_tokens: int


PROMPTS: dict[TaskKind, TaskPrompt] = {
    TaskKind.FILTER: TaskPrompt(
        system="You judge statements about the data you are given. You answer Yes or No.",
        user="Decide whether this statement is true:\n\n{instruction}\n\nIs the statement true? Answer Yes or No.",
        max_tokens=4,
    ),
    TaskKind.MAP: TaskPrompt(
        system="You answer questions about the data you are given, briefly and exactly.",
        user="{instruction}",
        max_tokens=256,
    ),
    TaskKind.SCORE: TaskPrompt(
        system="You rate data on a numeric scale.",
        user="{instruction}\n\nRate it on a scale from {lo} to {hi}.",
        max_tokens=8,
    ),
    TaskKind.CLASSIFY: TaskPrompt(
        system="You classify data into the categories you are given.",
        user="Classify: {instruction}\n\nCategories: {choices}.",
        max_tokens=16,
    ),
    TaskKind.EXTRACT: TaskPrompt(
        system="You extract fields from text as JSON. A field the text does not state is null.",
        user="Extract the fields {fields} from this:\n\n{instruction}",
        max_tokens=512,
    ),
}


def row_request(question: Question, row: Mapping[str, object], *, request_id: str) -> ModelRequest:
    """The request an operator's question makes of one row: its instruction rendered over the row's
    cells (a cell that cannot be rendered becomes the request's ``input_error``), wrapped in the
    task prompt of its kind. Execution (``pipeline.workers.semantic_batches``) and token estimation
    (``cost_model.tokens``) both build requests here, so estimates count what is sent.

    >>> row_request(Question(TaskKind.FILTER, "{text} is positive"), {"text": "great"}, request_id="1").prompt[-23:]
    'true? Answer Yes or No.'
    """
    rendered = render_prompt(question.instruction, row, allow_non_string=True)
    return build_request(
        question.kind,
        rendered.text,
        request_id=request_id,
        input_error=rendered.problem,
        choices=question.choices,
        lo=question.lo,
        hi=question.hi,
        fields=question.fields,
    )


def build_request(
    kind: TaskKind,
    instruction: str,
    *,
    request_id: str,
    input_error: str | None = None,
    choices: tuple[str, ...] = (),
    lo: float | None = None,
    hi: float | None = None,
    fields: tuple[tuple[str, str], ...] = (),
) -> ModelRequest:
    """The request for one row: e.g. ``build_request(TaskKind.FILTER, "great lamp is positive", request_id="7")``."""
    prompt = PROMPTS[kind]
    constraint: OutputConstraint
    if kind == TaskKind.FILTER:
        constraint = OutputConstraint.choice("Yes", "No")
        text = prompt.user.format(instruction=instruction)
    elif kind == TaskKind.CLASSIFY:
        constraint = OutputConstraint.choice(*choices)
        text = prompt.user.format(instruction=instruction, choices=", ".join(choices))
    elif kind == TaskKind.SCORE:
        assert lo is not None and hi is not None
        if float(lo).is_integer() and float(hi).is_integer() and hi - lo >= 2:
            steps = tuple(str(value) for value in range(int(lo), int(hi) + 1))
            constraint = OutputConstraint.choice(*steps)
        else:
            # A fractional range (0 to 1, 0.5 to 2.5) has no whole steps to choose from: a
            # choice of range(int(lo), int(hi) + 1) allowed only "0" and "1" for 0..1.
            constraint = OutputConstraint.text()
        text = prompt.user.format(instruction=instruction, lo=_number(lo), hi=_number(hi))
    elif kind == TaskKind.EXTRACT:
        constraint = OutputConstraint.schema(extract_schema(fields))
        text = prompt.user.format(instruction=instruction, fields=", ".join(name for name, _ in fields))
    else:
        constraint = OutputConstraint.text()
        text = prompt.user.format(instruction=instruction)
    return ModelRequest(
        prompt=text,
        system=prompt.system,
        constraint=constraint,
        max_tokens=prompt.max_tokens,
        request_id=request_id,
        input_error=input_error,
    )


def extract_schema(fields: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """JSON schema of an extraction: each field nullable, all required."""
    properties = {name: {"type": [JSON_TYPES[kind], "null"]} for name, kind in fields}
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name, _ in fields],
        "additionalProperties": False,
    }


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
