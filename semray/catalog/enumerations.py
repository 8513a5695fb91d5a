"""Enumerated values inside a document's text: runs of ``key: value`` lines and bulleted pairs.

- Plain lines: at least three consecutive ``Key: value`` lines (a key of at most 40 characters
  and 4 words that starts with a letter; a colon then whitespace or the end of the line), of
  which at least half have a value (``X-cc:`` with nothing after it may sit inside a run). A
  line indented under a key line continues its value, as in e-mail headers.
- Bullets: at least two consecutive list items (``-``, ``*``, ``+``, ``•``, ``1.``, ``1)``) of the
  form ``key: value``, ``key — value``, ``key – value`` or ``key - value``.

A blank line, any other line, or a fenced code block ends a run. Each run is one set of rows
with columns ``key`` and ``value``.

>>> from semray.catalog.lines import split_lines
>>> text = "From: ann@x.org\\nTo: bob@x.org\\nSubject: Q3\\n\\nHi Bob"
>>> [(run.start, run.end, run.rows) for run in find_enumerations(text, split_lines(text), set())]
[(0, 41, [('From', 'ann@x.org'), ('To', 'bob@x.org'), ('Subject', 'Q3')])]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from semray.catalog.lines import Line

_KEY = r"[^\W\d_][^\W_]*(?:[ .'/&()#-]+[^\W_]+){0,3}[.)]?"
_PLAIN = re.compile(rf"[ \t]{{0,3}}(?P<key>{_KEY})[ \t]*:(?:[ \t]+(?P<value>.*?))?[ \t\r]*$")
_BULLET = re.compile(
    r"[ \t]*(?:[-*+\u2022]|\d{1,3}[.)])[ \t]+(?P<key>[^\W_][^\W_]*(?:[ .'/&()#-]+[^\W_]+){0,3})"
    r"[ \t]*(?::[ \t]+|[ \t]*[\u2014\u2013][ \t]*|[ \t]-[ \t]+)(?P<value>\S.*?)[ \t\r]*$"
)
_CONTINUATION = re.compile(r"[ \t]+\S")
_KEY_MAX_CHARS = 40
_PLAIN_MIN_LINES = 3
_BULLET_MIN_LINES = 2


@dataclass(slots=True)
class Enumeration:
    """A run of pairs spanning ``text[start:end]``."""

    start: int
    end: int
    rows: list[tuple[str, str]] = field(default_factory=list)
    bulleted: bool = False


def find_enumerations(text: str, lines: Sequence[Line], taken: set[int]) -> list[Enumeration]:
    """The runs of pairs in ``text``, skipping the line numbers in ``taken`` (tables)."""
    runs: list[Enumeration] = []
    current: Enumeration | None = None
    for number, line in enumerate(lines):
        content = text[line.start : line.end]
        pair = None if line.fenced or number in taken else _pair(content)
        if pair is not None and current is not None and current.bulleted == pair[2]:
            current.rows.append((pair[0], pair[1]))
            current.end = line.end
            continue
        if pair is None and current is not None and not current.bulleted and _continues(content, line, number, taken):
            key, value = current.rows[-1]
            current.rows[-1] = (key, " ".join(f"{value} {content}".split()))
            current.end = line.end
            continue
        _close(current, runs, text)
        current = None
        if pair is not None:
            offset = len(content) - len(content.lstrip())
            current = Enumeration(line.start + offset, line.end, [(pair[0], pair[1])], bulleted=pair[2])
    _close(current, runs, text)
    return runs


def _pair(content: str) -> tuple[str, str, bool] | None:
    """(key, value, bulleted) for a line that holds a pair, else None."""
    bullet = _BULLET.match(content)
    if bullet and len(bullet.group("key")) <= _KEY_MAX_CHARS:
        return bullet.group("key").strip(), bullet.group("value").strip(), True
    plain = _PLAIN.match(content)
    if plain and len(plain.group("key")) <= _KEY_MAX_CHARS:
        return plain.group("key").strip(), (plain.group("value") or "").strip(), False
    return None


def _continues(content: str, line: Line, number: int, taken: set[int]) -> bool:
    return not line.fenced and number not in taken and bool(_CONTINUATION.match(content))


def _close(run: Enumeration | None, runs: list[Enumeration], text: str) -> None:
    if run is None:
        return
    with_values = sum(1 for _, value in run.rows if value)
    enough = len(run.rows) >= (_BULLET_MIN_LINES if run.bulleted else _PLAIN_MIN_LINES)
    if enough and 2 * with_values >= len(run.rows):
        while run.end > run.start and text[run.end - 1].isspace():
            run.end -= 1
        runs.append(run)
