"""Decoding a model's JSON with repair of the faults models commonly make.

Tried in order, each only when the text still does not parse: prose or Markdown fences around
the object, ``//`` comment lines, trailing commas, Python literals (``True``, ``None``),
single-quoted strings (when the text has no double quotes), and brackets left open at the end
(a reply cut short). Every repair made is named, so the trace shows what was changed.

>>> value, repairs = decode_json('Here it is: {"a": [1, 2,], "b": True')
>>> value
{'a': [1, 2], 'b': True}
>>> repairs[-1]
'closed unclosed brackets'
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_COMMENT = re.compile(r"^\s*//.*$", re.MULTILINE)
_TRAILING = re.compile(r",(\s*[}\]])")
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_LITERALS = {"True": "true", "False": "false", "None": "null"}


class JsonRepairError(ValueError):
    """The text is not JSON even after every repair; the message says where it fails."""


def decode_json(text: str) -> tuple[Any, tuple[str, ...]]:
    """The decoded value and the repairs it needed (empty when the text was valid JSON)."""
    repairs: list[str] = []
    current = text.strip()
    error = _error(current)
    if error is None:
        return json.loads(current), ()
    for name, repair in _REPAIRS:
        fixed = repair(current)
        if fixed == current:
            continue
        current = fixed
        repairs.append(name)
        error = _error(current)
        if error is None:
            return json.loads(current), tuple(repairs)
    raise JsonRepairError(f"not valid JSON even after repairs ({', '.join(repairs) or 'none applied'}): {error}")


def _error(text: str) -> str | None:
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return f"{error.msg} at line {error.lineno} column {error.colno}"
    return None


def _unfence(text: str) -> str:
    found = _FENCE.search(text)
    return found.group(1).strip() if found else text


def _outermost(text: str) -> str:
    if "{" not in text:
        return text
    start = text.index("{")
    end = text.rindex("}") + 1 if "}" in text[start:] else len(text)
    return text[start:end]


def _outside_strings(text: str, change: Callable[[str], str]) -> str:
    pieces, last = [], 0
    for match in _STRINGS.finditer(text):
        pieces.append(change(text[last : match.start()]))
        pieces.append(match.group())
        last = match.end()
    pieces.append(change(text[last:]))
    return "".join(pieces)


def _literals(text: str) -> str:
    return _outside_strings(text, lambda part: re.sub(r"\b(True|False|None)\b", lambda m: _LITERALS[m.group()], part))


def _single_quotes(text: str) -> str:
    return text.replace("'", '"') if '"' not in text else text


def _close(text: str) -> str:
    stack: list[str] = []
    for char in _STRINGS.sub('""', text):
        if char in "[{":
            stack.append("]" if char == "[" else "}")
        elif char in "]}" and stack:
            stack.pop()
    if text.count('"') % 2 == 1:
        text += '"'
    return text + "".join(reversed(stack))


_REPAIRS: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("took the JSON out of a Markdown code fence", _unfence),
    ("kept the JSON between the first { and the last }", _outermost),
    ("removed // comment lines", lambda text: _COMMENT.sub("", text)),
    ("removed trailing commas", lambda text: _outside_strings(text, lambda part: _TRAILING.sub(r"\1", part))),
    ("replaced Python literals True/False/None", _literals),
    ("replaced single quotes with double quotes", _single_quotes),
    ("closed unclosed brackets", _close),
)
