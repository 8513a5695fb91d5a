"""Schemas of plan nodes: ordered, named columns with DuckDB type names.

DuckDB is the engine that evaluates relational expressions on Arrow batches, so its
type names are the plan's type vocabulary; Arrow schemas convert both ways.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from semray.errors import ColumnNotFoundError, PlanError

ROW_ID = "_rowid"
"""Name of the stable row-id column that every operator carries."""


class Column(BaseModel):
    """One named, typed column, e.g. ``Column(name="rating", type="BIGINT")``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    type: str


class Schema(BaseModel):
    """An ordered tuple of columns with unique names.

    >>> Schema.of(("a", "BIGINT"), ("b", "VARCHAR")).names
    ('a', 'b')
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    columns: tuple[Column, ...]

    def model_post_init(self, context: object, /) -> None:
        seen: set[str] = set()
        for column in self.columns:
            if column.name in seen:
                raise PlanError(f"duplicate column name {column.name!r} in schema")
            seen.add(column.name)

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


def to_arrow_schema(schema: Schema) -> pa.Schema:
    if not schema.columns:
        return pa.schema([])
    select = ", ".join(f"NULL::{column.type} AS {quote(column.name)}" for column in schema.columns)
    return duckdb.connect().sql(f"SELECT {select} LIMIT 0").to_arrow_table().schema


def quote(name: str) -> str:
    """Quote an identifier for DuckDB SQL."""
    return '"' + name.replace('"', '""') + '"'
