"""The headings of a document, found from its own structure, by format.

- text, Markdown and HTML (whose extraction writes ``#`` heading lines): ATX headings
  (``## Title``, closing ``#``s dropped) and setext headings (a line underlined with at least
  three ``=`` for level 1 or ``-`` for level 2; the line above must start a paragraph, so a
  ``---`` rule after a blank line is not a heading, and be a title: a letter or digit, at most
  80 characters and 12 words; in plain text, where a dashed rule under a line of an e-mail is
  common, the underline must also be at least half as long as the title). Nothing inside a
  fenced code block.
- PDF: lines that look like headings, since its text has no markup: numbered titles
  (``2.1 Results``, level = depth of the number; ``3. Method`` only when neither neighbouring
  line is numbered too, which would make it a list item) and short all-capital lines
  (``INTRODUCTION``, level 1) that do not repeat three times or more (running page headers).
  A title starts with a capital and does not end in ``.``, ``,`` or ``;``.

>>> [(h.level, h.title) for h in find_headings("Intro\\n=====\\n\\n## Scope ##\\ntext", "markdown")]
[(1, 'Intro'), (2, 'Scope')]
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from semray.catalog.lines import Line, is_blank, split_lines

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t\r]*$")
_SETEXT = re.compile(r" {0,3}(={3,}|-{3,})[ \t\r]*$")
_NUMBERED = re.compile(r"\s*(\d{1,2}(?:\.\d{1,2}){0,3})(\.?)\s+(\S.*?)\s*$")
_TITLE_MAX_CHARS = 80
_TITLE_MAX_WORDS = 12
_CAPS_MAX_CHARS = 60
_RUNNING_HEADER = 3


@dataclass(frozen=True, slots=True)
class Heading:
    """A heading of ``level`` (1 outermost) whose lines span ``text[start:end]``.

    ``start == end`` marks a section boundary with no heading line in the text (a model's).
    """

    level: int
    title: str
    start: int
    end: int


def find_headings(text: str, format: str, lines: Sequence[Line] | None = None) -> list[Heading]:
    """The headings of ``text`` in order; ``format`` is a ``DocumentText.format``."""
    lines = split_lines(text) if lines is None else lines
    if format == "pdf":
        return _layout_headings(text, lines)
    return _markdown_headings(text, lines, plain=format == "text")


def _markdown_headings(text: str, lines: Sequence[Line], plain: bool) -> list[Heading]:
    headings: list[Heading] = []
    for index, line in enumerate(lines):
        if line.fenced:
            continue
        content = text[line.start : line.end]
        atx = _ATX.match(content)
        if atx:
            title = (atx.group(2) or "").strip()
            if title:
                headings.append(Heading(len(atx.group(1)), title, line.start, line.end))
            continue
        if index == 0 or not _SETEXT.match(content):
            continue
        above = lines[index - 1]
        starts_paragraph = (
            index == 1 or is_blank(text, lines[index - 2]) or _is_heading_line(headings, lines[index - 2])
        )
        if above.fenced or is_blank(text, above) or _is_heading_line(headings, above) or not starts_paragraph:
            continue
        title = text[above.start : above.end].strip()
        if not _is_setext_title(title, content.strip(), plain):
            continue
        headings.append(Heading(1 if content.strip()[0] == "=" else 2, title, above.start, line.end))
    return headings


def _is_setext_title(title: str, underline: str, plain: bool) -> bool:
    """A short line with a letter or digit; in plain text also underlined for at least half its length."""
    if not any(char.isalnum() for char in title):
        return False
    if len(title) > _TITLE_MAX_CHARS or len(title.split()) > _TITLE_MAX_WORDS:
        return False
    return not plain or 2 * len(underline) >= len(title)


def _is_heading_line(headings: list[Heading], line: Line) -> bool:
    return bool(headings) and headings[-1].start <= line.start < max(headings[-1].end, headings[-1].start + 1)


def _layout_headings(text: str, lines: Sequence[Line]) -> list[Heading]:
    contents = [text[line.start : line.end].strip() for line in lines]
    repeated = Counter(contents)
    headings: list[Heading] = []
    for index, (line, content) in enumerate(zip(lines, contents, strict=True)):
        if not content or line.fenced:
            continue
        numbered = _NUMBERED.match(content)
        if numbered and _is_title(numbered.group(3)):
            number, dot = numbered.group(1), numbered.group(2)
            single = "." not in number
            if single and dot and (_is_numbered(contents, index, -1) or _is_numbered(contents, index, 1)):
                continue
            headings.append(Heading(number.count(".") + 1, content, line.start, line.end))
        elif _is_caps_title(content) and repeated[content] < _RUNNING_HEADER:
            headings.append(Heading(1, content, line.start, line.end))
    return headings


def _is_title(title: str) -> bool:
    return (
        len(title) <= _TITLE_MAX_CHARS
        and len(title.split()) <= _TITLE_MAX_WORDS
        and title[0].isupper()
        and not title.endswith((".", ",", ";"))
    )


def _is_caps_title(content: str) -> bool:
    letters = sum(char.isalpha() for char in content)
    return letters >= 4 and content.isupper() and len(content) <= _CAPS_MAX_CHARS and _is_title(content)


def _is_numbered(contents: list[str], index: int, step: int) -> bool:
    """True when the nearest non-blank line before (``step`` -1) or after (1) ``index`` starts with a number."""
    index += step
    while 0 <= index < len(contents) and not contents[index]:
        index += step
    return 0 <= index < len(contents) and bool(_NUMBERED.match(contents[index]))
