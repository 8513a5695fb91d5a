"""Strict parsing of model replies against an ``OutputConstraint`` (never ``eval``).

Tolerated, because models do it under any prompt: surrounding whitespace, quotes, a trailing
period, a leading ``Answer:``-style marker, Markdown code fences, and for a yes/no or true/false
choice list the other spelling of the same boolean. Anything else is a ``ReplyParseError``
whose message says why (it becomes the reason in the one repair re-ask).

>>> parse_reply(" Yes.", OutputConstraint.choice("Yes", "No"))
'Yes'
>>> parse_reply('```json\\n{"age": 3}\\n```', OutputConstraint.schema({"type": "object"}))
{'age': 3}
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

from semray.serving.contract import OutputConstraint, ResponseValue

_MARKER = re.compile(r"(?:final\s+answer|answer)\s*:\s*", re.IGNORECASE)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_TRUE = {"yes", "true", "y", "t", "1"}
_FALSE = {"no", "false", "n", "f", "0"}


class ReplyParseError(ValueError):
    """A reply does not satisfy its constraint; the message says why, for the repair re-ask."""


def parse_reply(text: str, constraint: OutputConstraint) -> ResponseValue:
    """Parse ``text`` under ``constraint``: the canonical choice, the validated JSON value, or the text."""
    if constraint.kind == "choice":
        return _parse_choice(text, constraint.choices)
    if constraint.kind == "json_schema":
        return _parse_json(text, constraint.json_schema or {})
    stripped = text.strip()
    if not stripped:
        raise ReplyParseError("the reply was empty")
    return stripped


def _normalise(text: str) -> str:
    return text.strip().strip("\"'`*").strip().rstrip(".!").strip().casefold()


def _parse_choice(text: str, choices: tuple[str, ...]) -> str:
    candidates = [text]
    markers = list(_MARKER.finditer(text))
    if markers:
        candidates.append(
            text[markers[-1].end() :].strip().splitlines()[0] if text[markers[-1].end() :].strip() else ""
        )
    stripped = text.strip()
    if stripped.startswith("{"):
        candidates.extend(str(v) for v in _json_values(stripped))
    by_name = {_normalise(choice): choice for choice in choices}
    for candidate in candidates:
        key = _normalise(candidate)
        if key in by_name:
            return by_name[key]
        synonym = _boolean_synonym(key, by_name)
        if synonym is not None:
            return synonym
    shown = text.strip()[:80]
    raise ReplyParseError(f"the reply {shown!r} is not exactly one of: {', '.join(choices)}")


def _boolean_synonym(key: str, by_name: dict[str, str]) -> str | None:
    """Map yes/true/1 and no/false/0 onto a two-option boolean choice list."""
    if len(by_name) != 2 or key not in _TRUE | _FALSE:
        return None
    polarity = key in _TRUE
    for name, choice in by_name.items():
        if (name in _TRUE) == polarity and name in _TRUE | _FALSE:
            return choice
    return None


def _json_values(text: str) -> list[Any]:
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError:
        return []
    return list(loaded.values()) if isinstance(loaded, dict) and len(loaded) == 1 else []


def _parse_json(text: str, schema: dict[str, Any]) -> ResponseValue:
    body = text.strip()
    fenced = _FENCE.search(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body.startswith(("{", "[")) and "{" in body:
        body = body[body.index("{") : body.rindex("}") + 1] if "}" in body else body
    try:
        value = json.loads(body)
    except json.JSONDecodeError as error:
        raise ReplyParseError(f"the reply is not valid JSON ({error.msg} at position {error.pos})") from None
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as error:
        where = "/".join(str(part) for part in error.absolute_path) or "the top level"
        raise ReplyParseError(f"the JSON does not match the schema at {where}: {error.message}") from None
    except jsonschema.SchemaError as error:
        raise ReplyParseError(f"the constraint's JSON schema is invalid: {error.message}") from None
    if isinstance(value, list):
        return {"items": value}
    result: ResponseValue = value
    return result
