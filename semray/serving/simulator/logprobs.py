"""Token logprobs of a simulated completion.

The first word token of each answer value carries ``log c`` (``c`` the answer's confidence) and
its alternatives share the rest, ``log((1 - c) / (n - 1))`` each; every other token has
logprob 0 (probability 1). So a caller reading the answer token's probability gets ``c``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from semray.serving.simulator.answers import Piece
from semray.serving.simulator.tokens import TokenCounter, segment

_HAS_WORD = re.compile(r"\w")


@dataclass(frozen=True, slots=True)
class ScoredToken:
    """One output token, its logprob, and the most likely tokens at its place (itself first)."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...]


def _first_word(text: str) -> str | None:
    return next((part for part in segment(text) if _HAS_WORD.search(part)), None)


def score_tokens(pieces: Sequence[Piece], confidence: float, options: int) -> list[ScoredToken]:
    """Split ``pieces`` into tokens with logprobs (see the module docstring)."""
    chosen = math.log(confidence)
    rest = math.log(max(1.0 - confidence, 1e-300) / max(options - 1, 1))
    tokens: list[ScoredToken] = []
    for piece in pieces:
        marked = False
        for part in segment(piece.text):
            if piece.answer and not marked and _HAS_WORD.search(part):
                marked = True
                seen = {part.strip()}
                top = [(part, chosen)]
                for alternative in piece.alternatives:
                    word = _first_word(alternative)
                    if word is not None and word.strip() not in seen:
                        seen.add(word.strip())
                        top.append((word, rest))
                tokens.append(ScoredToken(part, chosen, tuple(top)))
            else:
                tokens.append(ScoredToken(part, 0.0, ((part, 0.0),)))
    return tokens


def truncate(tokens: list[ScoredToken], limit: int | None, counter: TokenCounter) -> tuple[list[ScoredToken], bool]:
    """Cut the completion to at most ``limit`` counted tokens; True when something was cut."""
    if limit is None or counter.count("".join(t.token for t in tokens)) <= limit:
        return tokens, False
    kept: list[ScoredToken] = []
    for token in tokens:
        if counter.count("".join(t.token for t in [*kept, token])) > limit:
            break
        kept.append(token)
    return kept, True


def apply_stop(tokens: list[ScoredToken], stop: str | Sequence[str] | None) -> tuple[list[ScoredToken], bool]:
    """Cut the completion before the first stop sequence, as servers do; True when one was found."""
    stops = [stop] if isinstance(stop, str) else [s for s in (stop or ()) if s]
    text = "".join(token.token for token in tokens)
    cuts = [text.find(s) for s in stops if s in text]
    if not cuts:
        return tokens, False
    end, kept, position = min(cuts), [], 0
    for token in tokens:
        if position + len(token.token) <= end:
            kept.append(token)
        elif position < end:  # the stop begins inside this token: keep its head
            head = token.token[: end - position]
            kept.append(ScoredToken(head, token.logprob, ((head, token.logprob), *token.top[1:])))
        position += len(token.token)
    return kept, True
