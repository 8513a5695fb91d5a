"""Boundary checks on what an engine reports, before a reply is parsed or a token is charged.

Every backend's ``RawCompletion`` passes ``check_completion`` in the tier. Impossible values
become per-row errors instead of answers: a token logprob above 0 (beyond rounding), NaN or
infinite (``invalid_logprobs``); token counts that are not integers, negative, or above a sane
bound (``invalid_usage``, and those counts are never charged); a reply far longer than
``max_tokens`` allows (``too_long``); a reply cut at ``max_tokens`` (``truncated``); an empty
reply (``empty``).

>>> from semray.serving.backends.base import RawCompletion
>>> check_completion(RawCompletion(text="Yes", token_logprobs=(5.0,)), max_tokens=4, bound=1000).error
'invalid_logprobs: token 0 has logprob 5.0; a log-probability is finite and <= 0'
>>> check_completion(RawCompletion(text="Yes", token_logprobs=(1e-7,)), max_tokens=4, bound=1000).token_logprobs
(0.0,)
"""

from __future__ import annotations

import dataclasses
import math

from semray.serving.backends.base import RawCompletion
from semray.serving.contract import row_error

LOGPROB_ROUNDING = 1e-4
"""Positive logprobs up to this are float rounding of log(1) and are clamped to 0."""
TOKEN_BOUND_WITHOUT_CONTEXT = 10**7
"""Most tokens one call may report when the context length is unknown."""
TOKEN_BOUND_CONTEXTS = 10
"""Otherwise: this many times the context length."""
REPLY_CHARS_PER_TOKEN = 32
"""A reply longer than this many characters per ``max_tokens`` cannot have respected ``max_tokens``."""
MIN_REPLY_CHARS = 4096
SHOWN_CHARS = 200
"""How much of an over-long reply is kept in the error response (the rest is dropped)."""


def token_bound(context_length: int | None) -> int:
    """The most prompt or completion tokens one call can plausibly report.

    >>> token_bound(4096), token_bound(None)
    (40960, 10000000)
    """
    if context_length is None:
        return TOKEN_BOUND_WITHOUT_CONTEXT
    return min(TOKEN_BOUND_CONTEXTS * context_length, TOKEN_BOUND_WITHOUT_CONTEXT)


def max_reply_chars(max_tokens: int) -> int:
    """The longest reply text that ``max_tokens`` tokens can spell."""
    return max(REPLY_CHARS_PER_TOKEN * max_tokens, MIN_REPLY_CHARS)


def check_completion(completion: RawCompletion, *, max_tokens: int, bound: int) -> RawCompletion:
    """``completion`` with tiny positive logprobs clamped to 0, or with ``error`` set.

    An engine error is kept as it is. Invalid token counts are zeroed (never charged); the
    other failures keep their (valid) counts, since the tokens were spent.
    """
    if completion.error is not None:
        return completion
    usage_problem = _usage_problem(completion, bound)
    if usage_problem is not None:
        return dataclasses.replace(
            completion,
            error=row_error("invalid_usage", usage_problem),
            input_tokens=0,
            output_tokens=0,
            gpu_seconds=0.0,
        )
    logprobs, logprob_problem = _checked_logprobs(completion.token_logprobs)
    if logprob_problem is not None:
        return dataclasses.replace(completion, error=row_error("invalid_logprobs", logprob_problem), token_logprobs=())
    completion = dataclasses.replace(completion, token_logprobs=logprobs)
    limit = max_reply_chars(max_tokens)
    if len(completion.text) > limit:
        detail = (
            f"the reply has {len(completion.text)} characters, more than max_tokens={max_tokens} can produce "
            f"(at most {limit}); the engine ignored max_tokens"
        )
        return dataclasses.replace(
            completion, text=completion.text[:SHOWN_CHARS], error=row_error("too_long", detail), token_logprobs=()
        )
    if completion.finish_reason == "length":
        detail = (
            f"the reply was cut at max_tokens={max_tokens} (finish_reason=length) after "
            f"{completion.output_tokens} output tokens: {completion.text[:80]!r}; "
            "raise max_tokens or ask for a shorter answer"
        )
        return dataclasses.replace(completion, error=row_error("truncated", detail))
    if not completion.text.strip():
        return dataclasses.replace(completion, error=row_error("empty", "the model's reply was empty"))
    return completion


def _usage_problem(completion: RawCompletion, bound: int) -> str | None:
    for name, value in (("prompt_tokens", completion.input_tokens), ("completion_tokens", completion.output_tokens)):
        if isinstance(value, bool) or not isinstance(value, int):
            return f"the engine reported {name}={value!r}, not an integer"
        if value < 0 or value > bound:
            return f"the engine reported {name}={value}, outside 0..{bound}; these tokens are not charged"
    gpu = completion.gpu_seconds
    if not math.isfinite(gpu) or gpu < 0:
        return f"the engine reported gpu_seconds={gpu}, not a finite non-negative number"
    return None


def _checked_logprobs(logprobs: tuple[float, ...]) -> tuple[tuple[float, ...], str | None]:
    checked: list[float] = []
    for index, value in enumerate(logprobs):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return (), f"token {index} has logprob {value!r}; a log-probability is finite and <= 0"
        if value > LOGPROB_ROUNDING:
            return (), f"token {index} has logprob {value}; a log-probability is finite and <= 0"
        checked.append(min(float(value), 0.0))
    return tuple(checked), None
