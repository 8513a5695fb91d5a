"""Split a long paragraph into chunks of at most ``max_chars`` characters, never mid-word.

Chunks are packed greedily from sentences (a sentence ends at ``.``, ``!``, ``?`` or ``…``,
maybe followed by closing quotes or brackets, then whitespace and a capital letter, digit or
opening quote). A sentence longer than ``max_chars`` is split at line breaks, and a line still
too long at whitespace. A single word longer than ``max_chars`` becomes a chunk of its own,
longer than the limit, since it cannot be split without cutting it. Every span is trimmed of
whitespace, and the chunks cover every non-whitespace character of the paragraph exactly once.

>>> text = "One two. Three four. Five six."
>>> [text[start:end] for start, end in chunk_spans(text, 0, len(text), 20)]
['One two. Three four.', 'Five six.']
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from semray.catalog.lines import trimmed

_SENTENCE_END = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]]*(?=\s+[\"'\u201c\u2018(\[]?\w)")
_WORD = re.compile(r"\S+")

Span = tuple[int, int]


def chunk_spans(text: str, start: int, end: int, max_chars: int) -> list[Span]:
    """The chunks of ``text[start:end]`` as absolute ``(start, end)`` spans, in order."""
    chunks: list[Span] = []
    current: Span | None = None
    for unit in _units(text, start, end, max_chars):
        if current is not None and unit[1] - current[0] <= max_chars:
            current = (current[0], unit[1])
            continue
        if current is not None:
            chunks.append(current)
        current = unit
    if current is not None:
        chunks.append(current)
    return chunks


def _units(text: str, start: int, end: int, max_chars: int) -> Iterator[Span]:
    """Sentences of ``text[start:end]``, each split further while longer than ``max_chars``."""
    for sentence in _sentences(text, start, end):
        if sentence[1] - sentence[0] <= max_chars:
            yield sentence
            continue
        for line in _lines(text, *sentence):
            if line[1] - line[0] <= max_chars:
                yield line
            else:
                yield from _words(text, *line)


def _sentences(text: str, start: int, end: int) -> Iterator[Span]:
    begin = start
    for match in _SENTENCE_END.finditer(text, start, end):
        if _capital_follows(text, match.end(), end):
            yield from _trimmed(text, begin, match.end())
            begin = match.end()
    yield from _trimmed(text, begin, end)


def _capital_follows(text: str, position: int, end: int) -> bool:
    """True when the first word character after ``position`` is a capital letter or a digit."""
    for char in text[position : min(end, position + 8)]:
        if char.isalnum():
            return char.isupper() or char.isdigit()
    return False


def _lines(text: str, start: int, end: int) -> Iterator[Span]:
    begin = start
    while (newline := text.find("\n", begin, end)) >= 0:
        yield from _trimmed(text, begin, newline)
        begin = newline + 1
    yield from _trimmed(text, begin, end)


def _words(text: str, start: int, end: int) -> Iterator[Span]:
    """Each word of the span; ``chunk_spans`` packs them back together up to the limit."""
    for match in _WORD.finditer(text, start, end):
        yield match.start(), match.end()


def _trimmed(text: str, start: int, end: int) -> Iterator[Span]:
    """The span without surrounding whitespace, unless nothing is left."""
    start, end = trimmed(text, start, end)
    if start < end:
        yield start, end
