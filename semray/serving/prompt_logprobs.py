"""Token logprobs of a given text from an OpenAI-compatible endpoint: the prompt scored, nothing generated.

A scorer needs ``log p(token | text before it)`` for each token of a text it did not write. An
OpenAI-compatible ``/v1/completions`` route gives them for the prompt itself when asked to echo it
with logprobs: ``{"prompt": TEXT, "echo": true, "logprobs": 1, "max_tokens": 1, "temperature": 0}``
answers ``choices[0].logprobs.tokens`` and ``.token_logprobs`` for the prompt's tokens followed by
the one generated token (vLLM's OpenAI server: ``echo`` turns on ``prompt_logprobs``; the first
prompt token has none, ``null``); ``usage.prompt_tokens`` says how many of them are the prompt's.
``max_tokens`` is 1, not 0, because servers differ on 0; the generated token is dropped.

A server that answers without them (no ``logprobs``, fewer tokens than the prompt has: it does not
echo; values that are not logprobs) cannot score: ``PromptLogprobsError`` names the URL, what came
back and what to set, at the first call. The API key is the tier's (``api_key_env``), sent by
``OpenAIBackend`` and never logged.

>>> client = PromptLogprobClient(TierConfig(backend="openai", model="scorer",
...     base_url="http://127.0.0.1:8000/v1"))  # doctest: +SKIP
>>> client.score("Question: q\\nDatasets to use: reviews").tokens[-1]  # doctest: +SKIP
' reviews'
"""

from __future__ import annotations

import asyncio
import math
import threading
from dataclasses import dataclass
from typing import Any

import httpx

from semray.log import get_logger
from semray.serving.backends.openai import OpenAIBackend
from semray.serving.config import TierConfig
from semray.serving.errors import PromptLogprobsError

log = get_logger(__name__)

NOT_FOUND_HINT = (
    "prompt scoring needs the legacy /v1/completions route of an OpenAI-compatible server (vLLM's has it; a "
    "chat-only server cannot score): point base_url of the [scorer] table in the model profile at one, or use a "
    'local transformers model (backend = "hf", model_path = ...)'
)
REJECTED_HINT = (
    "the server does not take an echoed prompt with logprobs (echo: true, logprobs: 1, max_tokens: 1): use an "
    "endpoint that does (vLLM's OpenAI server), or a local transformers model for the [scorer] table "
    '(backend = "hf", model_path = ...)'
)
MIN_LOGPROB = -1e4
"""Below this a value is not a logprob a server meant (vLLM clamps -inf to -9999.0)."""


@dataclass(frozen=True, slots=True)
class PromptLogprobs:
    """The prompt's tokens as the server decoded them and each one's logprob (None: the first, unscored)."""

    tokens: tuple[str, ...]
    logprobs: tuple[float | None, ...]


class PromptLogprobClient:
    """Scores prompts on one endpoint (an ``openai`` ``TierConfig``), one call at a time, from any thread.

    It keeps one event loop (and so one HTTP client and its connections) for its whole life; ``close`` ends them.
    """

    def __init__(self, tier: TierConfig, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._backend = OpenAIBackend(tier, transport=transport)
        self.model = tier.model
        self.identity = f"{self._backend.identity} {tier.model}"
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self.calls = 0
        self.prompt_tokens = 0
        """What the scoring calls cost, in prompt tokens (the generated token is not counted)."""

    def score(self, prompt: str) -> PromptLogprobs:
        """The token logprobs of ``prompt``; raises ``PromptLogprobsError`` when the server cannot give them."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": 1,
            "temperature": 0.0,
            "echo": True,
            "logprobs": 1,
        }
        with self._lock:
            payload, url = self._loop.run_until_complete(
                self._backend.post_completion(body, not_found_hint=NOT_FOUND_HINT, rejected_hint=REJECTED_HINT)
            )
            found = echoed_logprobs(payload, url, self.model)
            self.calls += 1
            self.prompt_tokens += len(found.tokens)
        return found

    def close(self) -> None:
        with self._lock:
            if not self._loop.is_closed():
                self._loop.run_until_complete(self._backend.aclose())
                self._loop.close()


def echoed_logprobs(payload: Any, url: str, model: str) -> PromptLogprobs:
    """The prompt's tokens and logprobs from an echoed ``/completions`` body; ``PromptLogprobsError`` otherwise.

    >>> body = {"choices": [{"text": "a b c", "logprobs": {"tokens": ["a", " b", " c"],
    ...     "token_logprobs": [None, -0.5, -1.0]}}], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}
    >>> echoed_logprobs(body, "u", "m")
    PromptLogprobs(tokens=('a', ' b'), logprobs=(None, -0.5))
    """

    def refused(detail: str) -> PromptLogprobsError:
        log.warning("prompt_logprobs_refused", url=url, model=model, detail=detail[:200])
        return PromptLogprobsError(url, model, "no_prompt_logprobs", detail, status=200)

    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise refused("the body is not a completion (no 'choices')")
    usage = payload.get("usage")
    prompt_tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if isinstance(prompt_tokens, bool) or not isinstance(prompt_tokens, int) or prompt_tokens < 1:
        raise refused(f"usage.prompt_tokens is {prompt_tokens!r}, so the prompt's tokens cannot be told apart")
    logprobs = choices[0].get("logprobs")
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values):
        raise refused(f"choices[0].logprobs is {_shown(logprobs)}, not tokens with token_logprobs")
    if len(tokens) < prompt_tokens:
        raise refused(
            f"{len(tokens)} token logprob(s) came back for a prompt of {prompt_tokens} tokens: the prompt was not "
            "echoed with its logprobs"
        )
    found: list[float | None] = []
    for index, value in enumerate(values[:prompt_tokens]):
        if value is None and index == 0:
            found.append(None)  # nothing before the first token: no logprob
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise refused(f"prompt token {index} has logprob {value!r}, not a number")
        if not MIN_LOGPROB <= value <= 1e-6:
            raise refused(f"prompt token {index} has logprob {value!r}, outside [{MIN_LOGPROB:g}, 0]")
        found.append(min(float(value), 0.0))
    if not all(isinstance(token, str) for token in tokens[:prompt_tokens]):
        raise refused("the echoed tokens are not text")
    if all(token.startswith("token_id:") for token in tokens[:prompt_tokens]):
        raise refused("the echoed tokens are token ids, not text (a server run with --return-tokens-as-token-ids)")
    return PromptLogprobs(tuple(tokens[:prompt_tokens]), tuple(found))


def _shown(value: Any) -> str:
    return "missing (null)" if value is None else repr(value)[:120]
