"""Render ``{column}`` instruction templates over one row's cells, flagging unusable cells.

Cell values are substituted as text and never parsed as template syntax. A null, empty or
non-string cell does not fail the batch: the rendered prompt carries a problem that the
caller passes as ``ModelRequest.input_error``, and the tier answers that row with an error.

>>> render_prompt("Is {review} positive?", {"review": "great"}).text
'Is great positive?'
>>> render_prompt("Is {review} positive?", {"review": None}).problem
"empty_input: column 'review' is null"
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    text: str
    problem: str | None = None


def render_prompt(template: str, row: Mapping[str, object], *, allow_non_string: bool = False) -> RenderedPrompt:
    """Substitute each ``{column}`` with the row's cell; numbers are allowed with ``allow_non_string``."""
    pieces: list[str] = []
    problem: str | None = None
    for literal, field, _, _ in string.Formatter().parse(template):
        pieces.append(literal)
        if field is None:
            continue
        value = row.get(field)
        text, issue = _cell_text(field, value, allow_non_string)
        problem = problem or issue
        pieces.append(text)
    return RenderedPrompt("".join(pieces), problem)


def _cell_text(column: str, value: object, allow_non_string: bool) -> tuple[str, str | None]:
    if value is None or (isinstance(value, float) and value != value):
        return "", f"empty_input: column {column!r} is null"
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return "", f"non_string_input: column {column!r} holds undecodable bytes"
    if isinstance(value, str):
        if not value.strip():
            return value, f"empty_input: column {column!r} is empty"
        return value, None
    if allow_non_string and isinstance(value, int | float | bool):
        return str(value), None
    return str(value), f"non_string_input: column {column!r} holds {type(value).__name__}"
