"""One request/response contract for every model tier and backend (frozen pydantic values).

Semantic operators build ``ModelRequest`` values and get ``ModelResponse`` values back, whatever
serves the tier (simulator, OpenAI-compatible endpoint, local transformers, vLLM). Per-row
problems never raise: they come back as a response with ``error`` set and ``value=None``.

>>> request = ModelRequest(prompt="Is 'great phone' positive?", constraint=OutputConstraint.choice("Yes", "No"))
>>> request.constraint.choices
('Yes', 'No')
"""

from __future__ import annotations

import math
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

ErrorCode = Literal[
    "empty_input",
    "non_string_input",
    "prompt_too_long",
    "unparseable",
    "empty",
    "truncated",
    "too_long",
    "http_400",
    "model_error",
    "invalid_logprobs",
    "invalid_usage",
    "no_label",
]
"""Per-row error codes; ``ModelResponse.error`` starts with one of them followed by ': ' and details.

Input: ``empty_input``, ``non_string_input``, ``prompt_too_long``. Reply: ``unparseable`` (off
format after the repair re-ask), ``empty`` (blank or null content), ``truncated`` (the reply hit
``max_tokens``, ``finish_reason="length"``), ``too_long`` (far longer than ``max_tokens`` allows).
Engine: ``http_400`` (the server rejected this request), ``model_error`` (another refusal).
Impossible values: ``invalid_logprobs`` (a logprob > 0, NaN or infinite), ``invalid_usage``
(negative or absurd token counts); their tokens are never charged. Simulator: ``no_label`` (the
simulated tier has no label for the row; no call is charged).
"""
ERROR_CODES: tuple[str, ...] = get_args(ErrorCode)


def row_error(code: ErrorCode, detail: str) -> str:
    """The ``ModelResponse.error`` text for a per-row failure, e.g. ``row_error("empty", "no text")``.

    >>> row_error("truncated", "hit max_tokens=4")
    'truncated: hit max_tokens=4'
    """
    return f"{code}: {detail}"


class OutputConstraint(BaseModel):
    """What shape the answer must have: one of ``choices``, JSON matching ``json_schema``, or free text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["choice", "json_schema", "text"] = "text"
    choices: tuple[str, ...] = ()
    json_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _check_kind(self) -> OutputConstraint:
        if self.kind == "choice" and not self.choices:
            raise ValueError("a 'choice' constraint needs at least one choice")
        if self.kind == "json_schema" and not self.json_schema:
            raise ValueError("a 'json_schema' constraint needs a JSON schema")
        return self

    @classmethod
    def choice(cls, *choices: str) -> OutputConstraint:
        return cls(kind="choice", choices=tuple(choices))

    @classmethod
    def schema(cls, json_schema: dict[str, Any]) -> OutputConstraint:  # type: ignore[override]  # pydantic v1 name
        return cls(kind="json_schema", json_schema=json_schema)

    @classmethod
    def text(cls) -> OutputConstraint:
        return cls(kind="text")


class ModelRequest(BaseModel):
    """One call to a tier. ``request_id`` is the caller's tag (e.g. a row id), echoed in the response.

    A prompt that is not a string (a null or numeric cell rendered without care) is accepted and
    answered with a ``non_string_input`` error instead of failing the batch; ``input_error`` lets a
    caller that rendered the prompt itself mark a row as unanswerable (e.g. an empty cell).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str
    system: str | None = None
    constraint: OutputConstraint = Field(default_factory=OutputConstraint)
    max_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=0.0, ge=0.0)
    logprobs: bool = True
    request_id: str = ""
    input_error: str | None = Field(default=None, description="set by the caller: answer with this error, no call")

    @model_validator(mode="before")
    @classmethod
    def _tolerate_non_string_prompt(cls, data: Any) -> Any:
        if isinstance(data, dict) and "prompt" in data and not isinstance(data["prompt"], str):
            kind = type(data["prompt"]).__name__
            return {**data, "prompt": "", "input_error": data.get("input_error") or f"non_string_input: got {kind}"}
        return data


class Usage(BaseModel):
    """What one call cost. A cache hit costs nothing (all zeros)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    dollars: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    gpu_seconds: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            dollars=self.dollars + other.dollars,
            gpu_seconds=self.gpu_seconds + other.gpu_seconds,
        )


ResponseValue = str | bool | int | float | dict[str, Any] | None


class ModelResponse(BaseModel):
    """A tier's answer to one ``ModelRequest``; ``error`` set means ``value`` is None."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    value: ResponseValue
    confidence: float | None = Field(ge=0.0, le=1.0, description="exp(mean token logprob), within [0, 1]")
    token_logprobs: tuple[float, ...] = ()
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    tier: str = ""
    model: str = ""
    cache_hit: bool = False
    error: str | None = None
    request_id: str = ""
    truncated: bool = Field(default=False, description="the prompt was cut to fit the model's context")
    repaired: bool = Field(default=False, description="the answer parsed only after one repair call")
    calls: int = Field(default=1, description="model calls made: 0 on a cache hit or input error, 2 after repair")

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def error_code(self) -> str | None:
        return None if self.error is None else self.error.split(":", 1)[0]


def confidence_from_logprobs(logprobs: tuple[float, ...]) -> float | None:
    """``exp(mean token logprob)``, or None without logprobs.

    >>> round(confidence_from_logprobs((math.log(0.8), 0.0)), 4)
    0.8944
    """
    if not logprobs:
        return None
    return math.exp(sum(logprobs) / len(logprobs))


def error_response(request: ModelRequest, error: str, *, tier: str, model: str) -> ModelResponse:
    """A response that carries a per-row error and no value (no model call was charged)."""
    return ModelResponse(
        text="",
        value=None,
        confidence=None,
        tier=tier,
        model=model,
        error=error,
        request_id=request.request_id,
        calls=0,
    )
