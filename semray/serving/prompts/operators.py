"""Task prompts of the row-wise semantic operators, as versioned data.

An operator's instruction (with its ``{column}`` cells rendered) goes into ``{instruction}``;
the serving layer then adds how to answer (``formats.py``). The response cache is keyed
on the rendered prompt, so changing a template here invalidates cached answers by itself;
``OPERATOR_PROMPT_VERSION`` names the template set in logs and journals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from semray.serving.contract import ModelRequest, OutputConstraint

OPERATOR_PROMPT_VERSION = "operator-prompts/2"

TaskKind = Literal["filter", "map", "score", "classify", "extract"]
JSON_TYPES = {"text": "string", "int": "integer", "float": "number", "bool": "boolean", "date": "string"}


@dataclass(frozen=True, slots=True)
class TaskPrompt:
    """System text and a user template for one kind of semantic task."""

    system: str
    user: str
    max_tokens: int


PROMPTS: dict[TaskKind, TaskPrompt] = {
    "filter": TaskPrompt(
        system="You judge statements about the data you are given. You answer Yes or No.",
        user="Decide whether this statement is true:\n\n{instruction}\n\nIs the statement true? Answer Yes or No.",
        max_tokens=4,
    ),
    "map": TaskPrompt(
        system="You answer questions about the data you are given, briefly and exactly.",
        user="{instruction}",
        max_tokens=256,
    ),
    "score": TaskPrompt(
        system="You rate data on a numeric scale.",
        user="{instruction}\n\nRate it on a scale from {lo} to {hi}.",
        max_tokens=8,
    ),
    "classify": TaskPrompt(
        system="You classify data into the categories you are given.",
        user="Classify: {instruction}\n\nCategories: {choices}.",
        max_tokens=16,
    ),
    "extract": TaskPrompt(
        system="You extract fields from text as JSON. A field the text does not state is null.",
        user="Extract the fields {fields} from this:\n\n{instruction}",
        max_tokens=512,
    ),
}


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
    """The request for one row: e.g. ``build_request("filter", "great lamp is positive", request_id="7")``."""
    prompt = PROMPTS[kind]
    constraint: OutputConstraint
    if kind == "filter":
        constraint = OutputConstraint.choice("Yes", "No")
        text = prompt.user.format(instruction=instruction)
    elif kind == "classify":
        constraint = OutputConstraint.choice(*choices)
        text = prompt.user.format(instruction=instruction, choices=", ".join(choices))
    elif kind == "score":
        assert lo is not None and hi is not None
        if float(lo).is_integer() and float(hi).is_integer() and hi - lo >= 2:
            steps = tuple(str(value) for value in range(int(lo), int(hi) + 1))
            constraint = OutputConstraint.choice(*steps)
        else:
            # A fractional range (0 to 1, 0.5 to 2.5) has no whole steps to choose from: a
            # choice of range(int(lo), int(hi) + 1) allowed only "0" and "1" for 0..1.
            constraint = OutputConstraint.text()
        text = prompt.user.format(instruction=instruction, lo=_number(lo), hi=_number(hi))
    elif kind == "extract":
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
