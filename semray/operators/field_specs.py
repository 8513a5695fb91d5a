"""Typed fields (`ExtractField`, `ValueType`) and the one grammar of field lists:
``"sender: text, amount: float, urgent"``.

`parse_fields` reads the fields of `Query.sem_extract` and `Query.sem_code` and of SQL's
``SEM_EXTRACT`` and ``SEM_CODE``; `parse_value_type` reads a value type (``SEM_MAP``'s too).
A field is ``name`` or ``name: type``, fields are separated by commas, the type defaults to
text and may be a semray value type or a SQL synonym of one, in any case (``VARCHAR``,
``integer``, ``double``; `VALUE_TYPES`). A name is any text without a comma or a colon.

>>> [(f.name, f.type) for f in parse_fields("sender, amount: DOUBLE, paid: boolean")]
[('sender', 'text'), ('amount', 'float'), ('paid', 'bool')]
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, ValidationError
from pydantic_core import PydanticCustomError

from semray.errors import PlanError
from semray.operators.relational import Frozen
from semray.operators.schema import argument_error

ValueType = Literal["text", "int", "float", "bool", "date"]


def _named(name: str) -> str:
    if not name:
        raise PydanticCustomError("output_name", "empty output column name; give the column a name")
    return name


OutputName = Annotated[str, AfterValidator(_named)]
"""An output column name: not empty."""


class ExtractField(Frozen):
    """One field to extract: ``ExtractField(name="sender", type="text")``."""

    name: OutputName
    type: ValueType = "text"
    description: str = ""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise argument_error("ExtractField", error) from None


VALUE_TYPES: dict[str, ValueType] = {
    **{name: name for name in get_args(ValueType)},
    "varchar": "text", "string": "text", "str": "text",
    "integer": "int", "bigint": "int", "number": "float",
    "double": "float", "real": "float", "decimal": "float",
    "boolean": "bool",
}  # fmt: skip
"""Each value type a field or ``SEM_MAP`` may name (lower case) -> the semray value type."""
SUPPORTED = ", ".join(get_args(ValueType))
TYPE_WORDS = frozenset({"int", "integer", "bigint", "float", "double", "decimal", "bool", "boolean", "varchar", "str"})
"""Type names that end no plausible column name ("start date", "order number" are names): a field
written "amount float" is a forgotten colon."""


class FieldSpecError(PlanError):
    """A field list or value type that does not parse. ``what`` names the offending part and
    ``instead`` says how to write it, for callers that phrase the error their own way (SQL)."""

    def __init__(self, message: str, what: str, instead: str) -> None:
        super().__init__(message)
        self.what = what
        self.instead = instead


def parse_value_type(name: str) -> ValueType:
    """The value type ``name`` stands for: ``parse_value_type(" Integer ") == "int"``."""
    kind = VALUE_TYPES.get(name.strip().lower())
    if kind is None:
        raise FieldSpecError(
            f"value type {name!r} is not one of {SUPPORTED}", f"the value type {name!r}", f"use one of {SUPPORTED}"
        )
    return kind


def parse_fields(spec: str) -> tuple[ExtractField, ...]:
    """Parse ``"sender: text, amount: float"`` into extraction fields (type defaults to text).

    >>> [f.type for f in parse_fields("sender, amount: float")]
    ['text', 'float']
    >>> try:
    ...     parse_fields("amount float")
    ... except FieldSpecError as error:
    ...     print(error.instead)
    write it as 'amount: float'
    """
    fields = []
    for part in spec.split(","):
        name, _, kind = (piece.strip() for piece in part.partition(":"))
        if not name:
            raise FieldSpecError(
                f"SemExtract: empty field in {spec!r}; write 'name: type, ...'",
                f"the field spec {part.strip()!r}",
                "write fields as 'name: type, ...'",
            )
        *words, last = name.split()
        if not kind and words and last.lower() in TYPE_WORDS:
            # "amount float": a forgotten colon, not a text field named "amount float"
            written = f"{' '.join(words)}: {last}"
            raise FieldSpecError(
                f"SemExtract: field {name!r} ends in the type {last!r} but has no colon; did you mean {written!r}?",
                f"the field spec {part.strip()!r}",
                f"write it as {written!r}",
            )
        try:
            value_type = parse_value_type(kind or "text")
        except FieldSpecError as error:
            raise FieldSpecError(
                f"SemExtract: field {name!r} has type {kind!r}; use one of {SUPPORTED}", error.what, error.instead
            ) from None
        fields.append(ExtractField(name=name, type=value_type))
    return tuple(fields)
