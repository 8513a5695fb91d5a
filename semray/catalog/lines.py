"""A document's lines as character spans, with fenced code blocks marked.

Segmentation and snippet finding both work line by line: headings, blank lines, table rows and
``key: value`` lines are line facts. A line ends at ``\\n`` only (a ``\\r`` before it is part of
the line, and counts as whitespace). Lines inside a fenced code block (```` ``` ```` or ``~~~``,
CommonMark's rule: closed by a fence of the same character at least as long; an unclosed fence
runs to the end) are ``fenced``, fences included, so nothing inside one reads as a heading, a
paragraph break or a table.

>>> [(line.start, line.end, line.fenced) for line in split_lines("a\\n```\\n# x\\n```\\nb")]
[(0, 1, False), (2, 5, True), (6, 9, True), (10, 13, True), (14, 15, False)]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True, slots=True)
class Line:
    """One line of a text: ``text[start:end]``, without its newline."""

    start: int
    end: int
    fenced: bool = False


def split_lines(text: str) -> tuple[Line, ...]:
    """Every line of ``text`` (an empty text has one empty line)."""
    lines: list[Line] = []
    fence: str | None = None
    start = 0
    while True:
        newline = text.find("\n", start)
        end = len(text) if newline < 0 else newline
        content = text[start:end]
        if fence is None:
            opened = _FENCE.match(content)
            # A backtick fence's info string may not contain a backtick (CommonMark).
            if opened and not (opened.group(1)[0] == "`" and "`" in content[opened.end() :]):
                fence = opened.group(1)
            lines.append(Line(start, end, fenced=fence is not None))
        else:
            lines.append(Line(start, end, fenced=True))
            closing = _FENCE.match(content)
            closes = closing is not None and closing.group(1)[0] == fence[0] and len(closing.group(1)) >= len(fence)
            if closes and closing is not None and not content[closing.end() :].strip():
                fence = None
        if newline < 0:
            return tuple(lines)
        start = newline + 1


def is_blank(text: str, line: Line) -> bool:
    """True when the line holds only whitespace (or nothing)."""
    return text[line.start : line.end].strip() == ""


def trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """``(start, end)`` moved inwards past whitespace; ``(start, start)`` when only whitespace.

    >>> trimmed("  ab \\n", 0, 6)
    (2, 4)
    """
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
