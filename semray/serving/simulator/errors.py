"""Errors the simulated model tier raises; all are ``SemrayError`` children.

They live here because ``semray/errors.py`` belongs to the core; they can move there
unchanged (they only depend on ``SemrayError``).
"""

from __future__ import annotations

from typing import Literal

from semray.errors import SemrayError


class SimulatorError(SemrayError):
    """The simulated model tier cannot do what was asked."""


class SimulatorConfigError(SimulatorError):
    """A simulator config is invalid: unknown column, missing table, bad task."""


class UnknownModelError(SimulatorError):
    """A request names a model the simulator config does not define (HTTP 404)."""

    def __init__(self, model: str, available: tuple[str, ...]) -> None:
        super().__init__(
            f"model {model!r} is not served by the simulator; use one of: {', '.join(available) or 'none'}"
        )
        self.model = model


class ContextLengthExceededError(SimulatorError):
    """A prompt plus its requested completion does not fit the model's context (HTTP 400)."""

    def __init__(self, model: str, context_length: int, prompt_tokens: int, completion_tokens: int) -> None:
        super().__init__(
            f"This model's maximum context length is {context_length} tokens. However, you requested "
            f"{prompt_tokens + completion_tokens} tokens ({prompt_tokens} in the messages, "
            f"{completion_tokens} in the completion). Please reduce the length of the messages or completion."
        )
        self.model = model
        self.context_length = context_length
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens


class InvalidRequestError(SimulatorError):
    """A request is malformed or asks for something the simulator does not support (HTTP 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


NoLabelReason = Literal["no_match", "no_task", "null_label"]


class NoLabelError(SimulatorError):
    """The simulator has no label to answer a prompt from (HTTP 422, per-row code ``no_label``).

    ``reason``: ``no_match`` (the prompt quotes no row of its datasets), ``no_task`` (no
    configured task fits the instruction, or a pair task found one row), ``null_label`` (the
    row's label is null). Nothing is charged for it.
    """

    def __init__(self, reason: NoLabelReason, detail: str) -> None:
        super().__init__(
            f"the simulator has no label for this prompt ({reason}: {detail}); it answers only rows its "
            "datasets and tasks label (docs/simulator.md)"
        )
        self.reason: NoLabelReason = reason
        self.detail = detail
