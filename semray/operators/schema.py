"""Schemas of plan nodes: ordered, named columns with DuckDB type names.

DuckDB is the engine that evaluates relational expressions on Arrow batches, so its
type names are the plan's type vocabulary; Arrow schemas convert both ways.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from semray.errors import ColumnNotFoundError, PlanError, suggest
from semray.sql_quoting import quote_identifier

ROW_ID = "_rowid"
"""Name of the stable row-id column that every operator carries."""

COMMON_TYPES = (
    "VARCHAR",
    "BIGINT",
    "INTEGER",
    "SMALLINT",
    "TINYINT",
    "HUGEINT",
    "UBIGINT",
    "DOUBLE",
    "FLOAT",
    "DECIMAL",
    "BOOLEAN",
    "DATE",
    "TIME",
    "TIMESTAMP",
    "TIMESTAMP WITH TIME ZONE",
    "INTERVAL",
    "BLOB",
    "UUID",
    "JSON",
)
"""Type names suggested when a column type is unknown (any DuckDB type is accepted)."""


class Column(BaseModel):
    """One named, typed column, e.g. ``Column(name="rating", type="BIGINT")``.

    The name is not empty and the type is one DuckDB knows (``VARCHAR``, ``DECIMAL(18,3)``,
    ``STRUCT(a BIGINT)``, ...); otherwise construction raises a PlanError naming the field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    type: str

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise argument_error("Column", error) from None

    @field_validator("name")
    @classmethod
    def _has_name(cls, name: str) -> str:
        if not name:
            raise PydanticCustomError("column_name", "empty column name; give every column a name")
        return name

    @field_validator("type")
    @classmethod
    def _is_known_type(cls, kind: str) -> str:
        problem = type_problem(kind)
        if problem is not None:
            raise PydanticCustomError("column_type", problem)
        return kind


class Schema(BaseModel):
    """An ordered tuple of columns with unique names.

    >>> Schema.of(("a", "BIGINT"), ("b", "VARCHAR")).names
    ('a', 'b')
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    columns: tuple[Column, ...]

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise argument_error("Schema", error) from None

    def model_post_init(self, context: object, /) -> None:
        from semray.operators.base import NodeArgumentError  # base imports this module

        seen: dict[str, tuple[int, str]] = {}
        for position, column in enumerate(self.columns):
            # DuckDB folds identifier case: with columns 'a' and 'A', the expression "A" reads 'a'.
            folded = column.name.lower()
            if folded in seen:
                first, name = seen[folded]
                detail = (
                    f"duplicate column name {column.name!r} (columns {first} and {position}); "
                    "give each column a distinct name"
                    if name == column.name
                    else f"columns {name!r} and {column.name!r} (columns {first} and {position}) differ only in "
                    "case, which SQL cannot tell apart (DuckDB folds identifier case); rename one"
                )
                raise NodeArgumentError("Schema", (), detail)
            seen[folded] = (position, column.name)

    @classmethod
    def of(cls, *pairs: tuple[str, str]) -> Schema:
        return cls(columns=tuple(Column(name=name, type=kind) for name, kind in pairs))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    def __iter__(self) -> Iterator[Column]:  # type: ignore[override]
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def type_of(self, name: str, where: str = "input") -> str:
        for column in self.columns:
            if column.name == name:
                return column.type
        raise ColumnNotFoundError(name, self.names, where)

    def require(self, names: tuple[str, ...] | list[str], where: str) -> None:
        """Raise ColumnNotFoundError for the first name not in this schema."""
        for name in names:
            if name not in self.names:
                raise ColumnNotFoundError(name, self.names, where)

    def user_columns(self) -> tuple[Column, ...]:
        return tuple(column for column in self.columns if column.name != ROW_ID)

    def to_arrow(self) -> pa.Schema:
        """The Arrow schema DuckDB produces for this schema."""
        return to_arrow_schema(self)

    @classmethod
    def from_arrow(cls, schema: pa.Schema) -> Schema:
        """Map an Arrow schema to DuckDB type names, e.g. int64 -> BIGINT."""
        empty = pa.Table.from_batches([], schema=schema)
        relation = duckdb.connect().from_arrow(empty)
        return cls.of(*((name, str(kind)) for name, kind in zip(relation.columns, relation.types, strict=True)))


def argument_error(model: str, error: ValidationError) -> PlanError:
    """A schema model's validation error as the PlanError plan nodes raise (it carries the path).

    The error is also a ValueError, so a plan node that holds this model reports the full path.
    """
    from semray.operators.base import NodeArgumentError, locate  # base imports this module

    return NodeArgumentError(model, *locate(error))


def type_problem(kind: str) -> str | None:
    """What is wrong with a column type name, or None for a type DuckDB knows.

    >>> type_problem("VARCHARR")
    "unknown column type 'VARCHARR'; did you mean 'VARCHAR'?"
    """
    return _type_problem(kind)


@functools.lru_cache(maxsize=1024)
def _type_problem(kind: str) -> str | None:
    if not kind.strip():
        return "empty column type; give a DuckDB type, e.g. VARCHAR or BIGINT"
    # The type is spliced into SQL (``NULL::<type>``); DuckDB's type parser takes a type and
    # nothing more, so ``INTEGER); SELECT 1; --`` is refused here.
    try:
        with _TYPES_LOCK:
            _type_parser().type(kind)
    except duckdb.Error as error:
        detail = str(error).splitlines()[0]
        if "exists in the" in detail:
            return f"column type {kind!r} needs a DuckDB extension, which plans do not load; use a built-in type"
        if "does not exist" in detail or "can not be converted" in detail or "not in the catalog" in detail:
            hint = suggest(kind.split("(")[0].strip(), COMMON_TYPES)
            advice = f"did you mean {hint!r}?" if hint else f"use a DuckDB type such as {', '.join(COMMON_TYPES[:8])}"
            return f"unknown column type {kind!r}; {advice}"
        return f"invalid column type {kind!r}: {detail.partition(': ')[2] or detail}"
    return None


_TYPES_LOCK = threading.Lock()


@functools.cache
def _type_parser() -> duckdb.DuckDBPyConnection:
    """A DuckDB that only parses type names: no file, network or extension access."""
    return duckdb.connect(
        config={
            "enable_external_access": False,
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        }
    )


def to_arrow_schema(schema: Schema) -> pa.Schema:
    if not schema.columns:
        return pa.schema([])
    select = ", ".join(f"NULL::{column.type} AS {quote(column.name)}" for column in schema.columns)
    # The types come from plan files too: the DuckDB that reads them reaches no file either.
    with _TYPES_LOCK:
        return _type_parser().sql(f"SELECT {select} LIMIT 0").to_arrow_table().schema


def right_names(left: Schema, right: Schema) -> dict[str, str]:
    """Output name of each right user column after a join: a clash with the left gets ``_right``.

    Used by Join, SemJoin, the SQL front end and the pair lowering, so every join names its
    columns alike.
    """
    taken = set(left.names)
    names: dict[str, str] = {}
    for column in right.user_columns():
        name = column.name
        while name in taken:
            name += "_right"
        taken.add(name)
        names[column.name] = name
    return names


quote = quote_identifier
"""Quote an identifier for DuckDB SQL (the one rule, in ``semray/sql_quoting.py``)."""
