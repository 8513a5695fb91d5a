"""Turn a failed parse of JSON lines into a SourceError that names the line, the key and the fix.

pyarrow says *that* a batch does not fit ("unexpected field", "changed from number to
string") but rarely *where*. ``explain_json_error`` bisects the batch for the first
line that fails, then looks at that one line: not JSON, a repeated key, a key the
schema lacks (first seen after the inference sample), or a value of another type.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from semray.errors import SourceError
from semray.sources.inference import InferenceWindow
from semray.sources.json_records import DuplicateKeyError, describe, unique_pairs

Parse = Callable[[Sequence[bytes], pa.Schema | None], pa.Table]


def explain_json_error(
    error: Exception,
    lines: Sequence[bytes],
    wheres: Sequence[int],
    schema: pa.Schema | None,
    parse: Parse,
    context: JsonContext,
) -> SourceError:
    """The error for the first line of ``lines`` that ``parse`` (with ``schema``, or inferring) rejects."""
    culprit = _first_failing(lines, schema, parse)
    if culprit is None:
        return context.generic(error)
    line = lines[culprit]
    where = f"{describe(context.array, wheres[culprit])} of JSON {context.path!r}"
    try:
        value = json.loads(line, object_pairs_hook=unique_pairs)
    except DuplicateKeyError as duplicate:
        return SourceError(f"{where} has the key {duplicate.key!r} twice, so one value would be lost; remove one")
    except json.JSONDecodeError as bad:
        return SourceError(f"{where} is not valid JSON (column {bad.colno}: {bad.msg}); fix that line")
    if not isinstance(value, dict):
        return SourceError(f"{where} holds a JSON {_kind(value)}, not an object; every row must be an object")
    if schema is None:
        return SourceError(
            f"{where} does not fit the rows before it ({error}); every value of a key must have one JSON type "
            "(all numbers, all strings, all objects ...; null is fine)"
        )
    advice = context.window.advice(context.position, context.first_row + culprit + 1)
    unknown = _unknown_key(value, list(schema))
    if unknown is not None:
        return SourceError(
            f"{where} has the key {unknown!r}, which the source's schema lacks (it was inferred from "
            f"{context.window.seen}), so its values would be lost; {advice}"
        )
    for field in schema:
        if field.name in value and not _parses([line], pa.schema([field]), parse):
            shown = json.dumps(value[field.name], ensure_ascii=False)[:200]
            return SourceError(
                f"{where}: column {field.name!r} was inferred as {field.type} from {context.window.seen}, but "
                f"this line holds {shown} (a JSON {_kind(value[field.name])}); {advice}"
            )
    return context.generic(error)


@dataclass(frozen=True, slots=True)
class JsonContext:
    """Which file and rows a batch came from, and what inference saw."""

    path: str
    array: bool
    window: InferenceWindow
    position: int
    """The file's index in the source, to say how far ``infer_files`` must reach."""
    first_row: int
    """The batch's first row within the file."""

    def generic(self, error: Exception) -> SourceError:
        return SourceError(
            f"cannot parse JSON {self.path!r}: {error}; types were inferred from {self.window.seen}, so raise "
            f"the {self.window.option} option if a later value has another type"
        )


def _first_failing(lines: Sequence[bytes], schema: pa.Schema | None, parse: Parse) -> int | None:
    """The index of the first line such that ``lines[: index + 1]`` fails to parse."""
    if _parses(lines, schema, parse):
        return None
    good, bad = 0, len(lines)  # lines[:good] parses, lines[:bad] does not
    while bad - good > 1:
        middle = (good + bad) // 2
        if _parses(lines[:middle], schema, parse):
            good = middle
        else:
            bad = middle
    return bad - 1


def _parses(lines: Sequence[bytes], schema: pa.Schema | None, parse: Parse) -> bool:
    try:
        parse(lines, schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return False
    return True


def _unknown_key(value: dict[str, object], fields: list[pa.Field], prefix: str = "") -> str | None:
    """The first key of ``value`` (dotted, inside objects) that ``fields`` lack."""
    by_name = {field.name: field for field in fields}
    for key, item in value.items():
        field = by_name.get(key)
        if field is None:
            return prefix + key
        inner = _struct_fields(field.type)
        items = item if isinstance(item, list) else [item]
        if inner is not None:
            for element in items:
                if isinstance(element, dict):
                    found = _unknown_key(element, inner, f"{prefix}{key}.")
                    if found is not None:
                        return found
    return None


def _struct_fields(kind: pa.DataType) -> list[pa.Field] | None:
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        kind = kind.value_type
    return list(kind) if pa.types.is_struct(kind) else None


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
