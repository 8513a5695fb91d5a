"""Schema inference helpers for text formats (CSV, JSON) that infer types from a sample.

Types are fixed once on the driver and given to every read task explicitly, so a
stream never changes a column's type halfway through a file. A later value that does
not fit (or, in JSON, a key the sample never showed) fails its read task with a
SourceError that says which option widens the sample (``InferenceWindow.advice``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class InferenceWindow:
    """How much of a source inference saw: the first ``amount`` bytes or rows of the first ``files`` files.

    >>> InferenceWindow("infer_rows", "rows", 1000, 8).advice(position=0, needed=2001)
    'set the infer_rows option to at least 2001 so that inference sees it'
    """

    option: str
    """``infer_bytes`` (CSV) or ``infer_rows`` (JSON)."""
    unit: str
    amount: int
    files: int

    @property
    def seen(self) -> str:
        """What inference read, e.g. ``"the first 1000 rows of the first 8 files"``."""
        return f"the first {self.amount} {self.unit} of the first {self.files} file(s)"

    def advice(self, position: int, needed: int | None) -> str:
        """How to make inference see a value ``needed`` units into the file at ``position`` of the source."""
        steps = []
        if needed is not None and needed > self.amount:
            steps.append(f"the {self.option} option to at least {needed}")
        if position >= self.files:
            steps.append(f"the infer_files option to at least {position + 1}")
        if not steps:
            return "check the file: its values do not match the types inferred for the source"
        return f"set {' and '.join(steps)} so that inference sees it"


def unify_schemas(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """Merge per-file schemas: column order of first appearance, types widened.

    Null-only columns become strings; int + float become float64; any other
    conflict becomes string (for CSV) or the permissive Arrow promotion (nested JSON).

    >>> unify_schemas([pa.schema([("a", pa.int64())]), pa.schema([("a", pa.float64()), ("b", pa.null())])])
    a: double
    b: string
    """
    order: list[str] = []
    types: dict[str, pa.DataType] = {}
    for schema in schemas:
        for field in schema:
            if field.name not in types:
                order.append(field.name)
                types[field.name] = field.type
            else:
                types[field.name] = widen(types[field.name], field.type)
    return pa.schema([pa.field(name, concrete(types[name])) for name in order])


def widen(left: pa.DataType, right: pa.DataType) -> pa.DataType:
    """The narrowest type that holds values of both ``left`` and ``right``."""
    if left == right:
        return left
    if pa.types.is_null(left):
        return right
    if pa.types.is_null(right):
        return left
    if pa.types.is_integer(left) and pa.types.is_integer(right):
        return pa.int64()
    if _is_number(left) and _is_number(right):
        return pa.float64()
    if pa.types.is_nested(left) or pa.types.is_nested(right):
        try:
            merged = pa.unify_schemas(
                [pa.schema([("v", left)]), pa.schema([("v", right)])], promote_options="permissive"
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return pa.string()
        return merged.field("v").type
    return pa.string()


def concrete(kind: pa.DataType) -> pa.DataType:
    """Replace null types (a column that was empty in the sample) by string, also inside nested types."""
    if pa.types.is_null(kind):
        return pa.string()
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, concrete(f.type)) for f in kind])
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(concrete(kind.value_type))
    return kind


def _is_number(kind: pa.DataType) -> bool:
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind))
