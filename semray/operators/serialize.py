"""JSON plans: a versioned document ``{"version": 1, "plan": {...}}`` and its JSON Schema.

A plan file is data a user may not have written, so it is read strictly and every refusal
is a PlanFormatError (or the PlanError a node raises) naming the JSON path of the bad field:

* the file is UTF-8 (a UTF-8 byte-order mark is skipped; UTF-16, UTF-32 and other encodings
  are refused, not guessed);
* numbers are finite JSON numbers (no ``NaN``/``Infinity``), integers fit in 64 bits;
* fields are typed strictly: ``"count": true``, ``"count": 2.5`` and ``"count": "3"`` are
  refused where an integer is expected (a float field takes ``2`` as 2.0);
* operators nest at most MAX_PLAN_DEPTH deep, other values at most MAX_VALUE_DEPTH;
* no object names a key twice (JSON would keep the last value and drop the first).

Nodes are built bottom-up without recursion, one at a time, so an error inside a node deep
in the plan names its path, e.g. ``invalid plan at plan.limit.input.scan.source_schema.columns.1.type``.
"""

from __future__ import annotations

import codecs
import functools
import json
import math
import os
import re
import stat
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from semray.errors import PlanError, PlanFormatError, SourceError, suggest
from semray.operators.base import Node, NodeArgumentError, locate
from semray.operators.plan import OPERATORS, PlanNode

PLAN_VERSION = 1
MAX_PLAN_DEPTH = 64
"""The most operators on one path from the root of a JSON plan to a leaf. Planning, lowering and
EXPLAIN walk plans recursively; 64 keeps them far from Python's recursion limit."""
MAX_VALUE_DEPTH = 32
"""The deepest nesting of JSON values inside one operator (its options, schema, ...)."""
MAX_JSON_DEPTH = 200
"""The deepest nesting of a plan document's JSON, checked before parsing: each operator adds one
level (two under a union), so a document within the two limits above stays within this one."""
INT64_MAX = 2**63 - 1
_SINGLE_CHARACTER_OPTIONS = {"csv": ("delimiter", "quote_char")}
_SURROGATE = re.compile("[\ud800-\udfff]")
# A JSON string; written as an unrolled loop, which runs ~30 times faster than (?:[^"\\]|\\.)* on
# long strings (one regex step per run of plain characters, not one per character).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")


class PlanDocument(BaseModel):
    """What ``semray run plan.json`` reads and ``Query.to_json()`` writes."""

    model_config = ConfigDict(frozen=True, extra="forbid", title="semray plan")

    version: Literal[1] = 1
    plan: PlanNode


_DOCUMENT = TypeAdapter(PlanDocument)
_OPERATORS: dict[str, type[Node]] = {str(cls.model_fields["op"].default): cls for cls in OPERATORS}


def plan_to_json(node: Node, indent: int | None = 2) -> str:
    """Serialize a plan, e.g. ``plan_to_json(query.plan)``."""
    document = {"version": PLAN_VERSION, "plan": node.model_dump(mode="json")}
    return json.dumps(document, indent=indent)


def plan_from_file(path: str | Path) -> Node:
    """Read and validate a JSON plan file (UTF-8), e.g. ``plan_from_file("plan.json")``."""
    file = Path(path)
    try:
        info = file.stat()
        _check_plan_file(file, info)
        data = file.read_bytes()
    except FileNotFoundError:
        raise SourceError(f"plan file {str(file)!r} not found") from None
    except OSError as error:
        raise SourceError(f"cannot read plan file {str(file)!r}: {error.strerror or error}") from None
    return plan_from_json(decode_plan(data, f"plan file {str(file)!r}"))


MAX_PLAN_FILE_BYTES = 64 << 20
"""The largest plan file read: plans name their sources rather than holding data, so a plan is
kilobytes; a bigger file is a mistake, and reading it whole would take the memory it takes."""


def _check_plan_file(file: Path, info: os.stat_result) -> None:
    """Refuse what reading would block on or exhaust memory with: a named pipe (reading one waits
    for a writer, forever), a device (``/dev/zero`` never ends), a socket, or a huge file."""
    if stat.S_ISDIR(info.st_mode):
        raise SourceError(f"cannot read plan file {str(file)!r}: it is a folder; give the plan's JSON file")
    if not stat.S_ISREG(info.st_mode):
        kinds = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                 (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))  # fmt: skip
        what = next((name for test, name in kinds if test(info.st_mode)), "not a regular file")
        raise SourceError(
            f"plan file {str(file)!r} is {what}, not a regular file; write the plan to a file and give its path"
        )
    if info.st_size > MAX_PLAN_FILE_BYTES:
        raise SourceError(
            f"plan file {str(file)!r} is {info.st_size:,} bytes, more than the {MAX_PLAN_FILE_BYTES:,} a plan "
            "may have; plans name their sources (a Scan's path) rather than holding data: is this the right file?"
        )


def decode_plan(data: bytes, where: str = "the plan") -> str:
    """The text of a plan's bytes: UTF-8, with or without a byte-order mark; anything else is refused.

    >>> decode_plan(b'\\xef\\xbb\\xbf{"version": 1}')
    '{"version": 1}'
    """
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    for mark, name in (
        (codecs.BOM_UTF32_LE, "UTF-32"),
        (codecs.BOM_UTF32_BE, "UTF-32"),
        (codecs.BOM_UTF16_LE, "UTF-16"),
        (codecs.BOM_UTF16_BE, "UTF-16"),
    ):
        if data.startswith(mark):
            raise PlanFormatError(
                f"{where} is {name} (it starts with a {name} byte-order mark); plans must be UTF-8: "
                f"convert it, e.g. iconv -f {name} -t UTF-8 plan.json > plan-utf8.json"
            )
    if b"\x00" in data[:4]:
        raise PlanFormatError(
            f"{where} has NUL bytes at its start, so it is UTF-16 or UTF-32, not UTF-8; plans must be UTF-8: "
            "convert it, e.g. iconv -f UTF-16 -t UTF-8 plan.json > plan-utf8.json"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise PlanFormatError(
            f"{where} is not UTF-8 (byte 0x{data[error.start]:02x} at offset {error.start}, line {line}); "
            "plans must be UTF-8: re-save it as UTF-8, e.g. iconv -f latin1 -t UTF-8 plan.json > plan-utf8.json"
        ) from None


def plan_from_json(text: str | bytes) -> Node:
    """Parse and validate a JSON plan; errors name the path to the bad field."""
    if isinstance(text, bytes):
        text = decode_plan(text)
    text = text.removeprefix("\ufeff")
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise PlanFormatError(
            f"plan JSON nests {depth} levels deep, more than the {MAX_JSON_DEPTH} semray reads (a plan nests "
            f"at most {MAX_PLAN_DEPTH} operators); flatten it or split it into several plans"
        )
    try:
        raw = json.loads(
            text, parse_int=_integer, parse_float=_float, parse_constant=_constant, object_pairs_hook=_unique_keys
        )
    except json.JSONDecodeError as error:
        raise PlanFormatError(
            f"plan is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    except RecursionError:
        raise PlanFormatError(
            "plan JSON nests too deeply to read (hundreds of levels); "
            f"a plan nests at most {MAX_PLAN_DEPTH} operators: flatten it or split it into several plans"
        ) from None
    return plan_from_dict(raw)


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in JSON text (brackets inside strings do not count).

    >>> json_depth('{"a": [1, {"b": "]]"}]}')
    3
    """
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub("", text)):
        depth += 1 if match.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def plan_from_dict(raw: Any) -> Node:
    """Validate a parsed plan document (``json.loads`` of a plan file) into its root node."""
    if not isinstance(raw, dict):
        raise PlanFormatError(f'a plan file is an object {{"version": 1, "plan": {{...}}}}, got {_kind(raw)}')
    for key in raw:
        if key not in ("version", "plan"):
            raise PlanFormatError(
                f'invalid plan at {key}: unknown field; a plan document has only "version" and "plan"'
            )
    if "version" not in raw:
        raise PlanFormatError(f'the plan has no "version"; add "version": {PLAN_VERSION}')
    version = raw["version"]
    if type(version) is not int or version != PLAN_VERSION:
        shown = version.text if isinstance(version, _Invalid) else json.dumps(version)
        raise PlanFormatError(
            f"plan version {shown} is not supported; this semray reads version {PLAN_VERSION} "
            "(re-export the plan with this semray)"
        )
    if "plan" not in raw:
        raise PlanFormatError('the plan document has no "plan"; give the root operator as "plan": {"op": ...}')
    return _build(raw["plan"])


def plan_json_schema() -> dict[str, Any]:
    """The published JSON Schema of plan documents (``semray schema``)."""
    schema = _DOCUMENT.json_schema()
    schema["$id"] = f"https://semray.dev/schema/plan-v{PLAN_VERSION}.json"
    return schema


@dataclass(frozen=True, slots=True)
class _Invalid:
    """A JSON number the loader cannot take; reported with the path of its field."""

    text: str
    problem: str


def _integer(text: str) -> int | _Invalid:
    digits = len(text.lstrip("-"))
    if digits > 19 or not -INT64_MAX - 1 <= (value := int(text)) <= INT64_MAX:
        shown = text if digits <= 30 else f"{text[:12]}... ({digits} digits)"
        return _Invalid(shown, f"the integer {shown} does not fit in 64 bits (at most {INT64_MAX})")
    return value


def _float(text: str) -> float | _Invalid:
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= 30 else text[:12] + "..."
        return _Invalid(shown, f"the number {shown} is too large for a 64-bit float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are distinct: with a repeated key ``json.loads`` keeps the last
    value, so ``{"predicate": "a > 1", "predicate": "true"}`` would lose the first silently."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            keys = dict(pairs)
            inside = f' in the "{keys["op"]}" operator' if isinstance(keys.get("op"), str) else ""
            raise PlanFormatError(
                f"plan JSON has the key {key!r} twice in one object{inside}; JSON would keep only the last "
                "value and drop the first silently: remove one"
            )
        result[key] = value
    return result


def _constant(text: str) -> _Invalid:
    return _Invalid(text, f"{text} is not a JSON number; give a finite number")


@dataclass(slots=True)
class _Pending:
    """A node dict waiting for its children: built in reverse pre-order, so children first."""

    cls: type[Node]
    raw: dict[str, Any]
    path: tuple[str, ...]
    parent: int | None
    slot: tuple[str, int | None]
    children: dict[str, Any] = field(default_factory=dict)


def _build(root: Any) -> Node:
    pending: list[_Pending] = []
    stack: list[tuple[Any, tuple[str, ...], int, int | None, tuple[str, int | None]]] = [
        (root, ("plan",), 1, None, ("", None))
    ]
    deepest: tuple[int, tuple[str, ...]] = (0, ())
    while stack:
        raw, path, depth, parent, slot = stack.pop()
        cls = _operator(raw, path)
        node_path = (*path, str(raw["op"]))
        deepest = max(deepest, (depth, node_path), key=lambda item: item[0])
        index = len(pending)
        pending.append(_Pending(cls, raw, node_path, parent, slot))
        for name in cls.child_fields:
            if name not in raw:
                continue  # the node's own validation reports the missing field
            value = raw[name]
            if typing.get_origin(cls.model_fields[name].annotation) is tuple:
                if isinstance(value, list):
                    pending[index].children[name] = [None] * len(value)
                    for position, item in enumerate(value):
                        stack.append((item, (*node_path, name, str(position)), depth + 1, index, (name, position)))
            else:
                stack.append((value, (*node_path, name), depth + 1, index, (name, None)))
    if deepest[0] > MAX_PLAN_DEPTH:
        raise PlanFormatError(
            f"invalid plan at {_short(deepest[1])}: the plan nests {deepest[0]} operators deep, more than the "
            f"{MAX_PLAN_DEPTH} semray reads; flatten it (merge consecutive filters, projections or limits) "
            "or split it into several plans"
        )
    built: Node | None = None
    for item in reversed(pending):
        node = _construct(item)
        if item.parent is None:
            built = node
            continue
        name, place = item.slot
        siblings = pending[item.parent].children
        if place is None:
            siblings[name] = node
        else:
            siblings[name][place] = node
    assert built is not None
    return built


def _operator(raw: Any, path: tuple[str, ...]) -> type[Node]:
    where = ".".join(path)
    if not isinstance(raw, dict):
        raise PlanFormatError(f'invalid plan at {where}: expected an operator, an object with "op", got {_kind(raw)}')
    ops = ", ".join(_OPERATORS)
    if "op" not in raw:
        raise PlanFormatError(f'invalid plan at {where}: the operator has no "op"; give one of {ops}')
    op = raw["op"]
    cls = _OPERATORS.get(op) if isinstance(op, str) else None
    if cls is None:
        hint = suggest(op, list(_OPERATORS)) if isinstance(op, str) else None
        advice = f"did you mean {hint!r}?" if hint else f"give one of {ops}"
        raise PlanFormatError(f"invalid plan at {where}.op: unknown operator {_shown(op)}; {advice}")
    return cls


def _construct(item: _Pending) -> Node:
    """Check the node's own fields strictly, then build it over its (already built) children."""
    own = {name: value for name, value in item.raw.items() if name not in item.cls.child_fields}
    _check_values(own, item.path)
    try:
        _own_fields(item.cls).model_validate_json(json.dumps(own), strict=True)
    except ValidationError as error:
        raise PlanFormatError(_message(item.path, error)) from None
    _check_scan(own, item.path)
    children = {name: item.raw[name] for name in item.cls.child_fields if name in item.raw}
    children.update({name: tuple(value) if isinstance(value, list) else value for name, value in item.children.items()})
    try:
        return item.cls(**own, **children)
    except NodeArgumentError as error:
        # A path into a derived schema (an output column) is not a field of the node: name the node.
        inner = error.path if error.path and error.path[0] in item.cls.model_fields else ()
        raise PlanFormatError(f"invalid plan at {'.'.join((*item.path, *inner))}: {error.detail}") from None
    except PlanError as error:
        message = str(error.args[0]) if error.args else str(error)
        error.args = (f"invalid plan at {'.'.join(item.path)}: {message}", *error.args[1:])
        raise


@functools.cache
def _own_fields(cls: type[Node]) -> type[BaseModel]:
    """A model of ``cls``'s own (non-child) fields, validated in strict mode: a JSON boolean is not
    an integer, a float is not an integer, a string is not a number or a boolean. (A node itself
    cannot be validated strictly: its ``__init__`` wraps errors, and pydantic drops strict mode at
    a model with its own ``__init__``.)"""
    fields: dict[str, Any] = {
        name: (info.annotation, info) for name, info in cls.model_fields.items() if name not in cls.child_fields
    }
    return create_model(f"{cls.__name__}Fields", __config__=ConfigDict(extra="forbid"), **fields)


def _check_values(own: dict[str, Any], path: tuple[str, ...]) -> None:
    """Refuse numbers the loader marked invalid, text that is not Unicode, and deep nesting."""
    stack: list[tuple[Any, tuple[str, ...], int]] = [(value, (*path, name), 1) for name, value in own.items()]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_VALUE_DEPTH:
            field_path = ".".join(where[: len(path) + 3]) + ("..." if len(where) > len(path) + 3 else "")
            raise PlanFormatError(
                f"invalid plan at {field_path}: values nest more than {MAX_VALUE_DEPTH} levels deep; "
                "operator fields are text, numbers, lists and small objects"
            )
        if isinstance(value, _Invalid):
            raise PlanFormatError(f"invalid plan at {'.'.join(where)}: {value.problem}")
        if isinstance(value, float) and not math.isfinite(value):
            raise PlanFormatError(f"invalid plan at {'.'.join(where)}: {value} is not a finite number")
        if isinstance(value, int) and not isinstance(value, bool) and not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise PlanFormatError(f"invalid plan at {'.'.join(where)}: the integer does not fit in 64 bits")
        if isinstance(value, str) and (found := _SURROGATE.search(value)):
            raise PlanFormatError(
                f"invalid plan at {'.'.join(where)}: the text holds an unpaired UTF-16 surrogate "
                f"({found.group()!r}), which is not Unicode text; fix the \\u escape"
            )
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and _SURROGATE.search(key):
                    raise PlanFormatError(f"invalid plan at {'.'.join(where)}: a key holds an unpaired surrogate")
                stack.append((item, (*where, str(key)), depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((item, (*where, str(position)), depth + 1) for position, item in enumerate(value))


def _check_scan(own: dict[str, Any], path: tuple[str, ...]) -> None:
    """A Scan reads at least one column; a CSV delimiter or quote is one ASCII character."""
    if own.get("op") != "scan":
        return
    if not own["source_schema"]["columns"]:
        raise PlanFormatError(
            f"invalid plan at {'.'.join((*path, 'source_schema', 'columns'))}: a Scan's source_schema lists no "
            'columns; list the source\'s columns, e.g. [{"name": "review", "type": "VARCHAR"}]'
        )
    source = own["source"]
    options = source.get("options") or {}
    for name in _SINGLE_CHARACTER_OPTIONS.get(str(source.get("kind")), ()):
        value = options.get(name)
        if isinstance(value, str) and value and (len(value) != 1 or not value.isascii() or value in "\r\n"):
            raise PlanFormatError(
                f"invalid plan at {'.'.join((*path, 'source', 'options', name))}: {name} must be one ASCII "
                f"character other than a line break, got {value!r}"
            )


def _message(path: tuple[str, ...], error: ValidationError) -> str:
    inner, detail = locate(error)
    first = error.errors()[0]
    given = first.get("input")
    shown = _shown(given)
    if (
        first["type"] != "missing"
        and not isinstance(given, dict | list)
        and shown not in detail
        and str(given) not in detail
    ):
        detail += f", got {shown}"
    return f"invalid plan at {'.'.join((*path, *inner))}: {detail}"


def _shown(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, str | int | float | bool) or value is None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    if isinstance(value, _Invalid):
        return value.text
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else f"{names.get(type(value), type(value).__name__)} ({_shown(value)})"


def _short(path: tuple[str, ...]) -> str:
    """A long path shown by its ends: ``plan.limit.input.limit...input.scan``."""
    if len(path) <= 12:
        return ".".join(path)
    return ".".join(path[:6]) + f"...({len(path) - 10} more)..." + ".".join(path[-4:])
