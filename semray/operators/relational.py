"""Relational logical operators: Scan, Filter, Project, Join, Aggregate, Union, Sort,
Limit, Distinct. Each derives its output schema and validates at construction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from semray.errors import PlanError
from semray.operators.base import Node
from semray.operators.expressions import (
    aggregate_type,
    check_join_condition,
    equi_join_keys,
    expression_type,
    parse_expression,
    referenced_columns,
)
from semray.operators.schema import ROW_ID, Column, Schema, right_names

if TYPE_CHECKING:
    from semray.operators.plan import PlanNode

ROW_ID_COLUMN = Column(name=ROW_ID, type="VARCHAR")
INT64_MAX = 2**63 - 1
"""The largest count a Limit takes: what a JSON plan's integers hold (``serialize.INT64_MAX``)."""


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CatalogPin(Frozen):
    """The catalogued dataset a Scan reads, at the catalog version its plan was made against.

    ``read_catalog("notes")`` pins the latest version. A re-run of a plan over a documents dataset
    reads that version (its parquet is named by its content hash; its segments are read at
    ``version``); a file or database dataset is read where it lives, as it is now:
    ``CatalogPin(dataset="notes", version=3, content_hash="9f2c...", documents=True)``.
    """

    dataset: str = Field(min_length=1)
    version: int = Field(ge=1, strict=True)
    """The catalog version (manifest number, ``semray catalog versions``)."""
    content_hash: str = Field(min_length=1)
    """The dataset's content hash at ``version``: checked against the catalog before its segments are used."""
    documents: bool = Field(default=False, strict=True)
    """A documents dataset: one row per document (``document_id``, ``text``), whose segments, vectors and
    full-text index the catalog holds, so SemSearch over it ranks by them instead of embedding every row."""


DOCUMENT_KEY = "document_id"
"""The column of a documents dataset's Scan (``CatalogPin.documents``) naming each row's document: the file's
path within the dataset, the catalog segments' ``document_id``. One definition for the cost model, the
planner's rules and the catalog, which all read that Scan."""
DOCUMENT_TEXT = "text"
"""The column of a documents dataset's Scan holding the text its catalog segments were made from."""


class SourceSpec(Frozen):
    """Where a Scan reads from: ``SourceSpec(kind="csv", path="reviews.csv")``.

    ``memory`` sources (pandas or Arrow objects) hold a process-local reference and
    cannot be saved in a JSON plan. ``catalog`` says which catalogued dataset (and catalog
    version) the source is; the reader still reads ``kind``/``path``/``options``.
    """

    kind: Literal["csv", "json", "parquet", "text", "sqlite", "duckdb", "postgres", "memory"]
    path: str | None = None
    options: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    catalog: CatalogPin | None = None

    def __hash__(self) -> int:
        return hash((self.kind, self.path, tuple(sorted(self.options.items())), self.catalog))

    @model_serializer(mode="wrap")
    def _without_unpinned(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A source of no catalog serializes as before the field existed: plans, their JSON and the
        # operator keys derived from it (journaled runs, cached answers) are unchanged.
        data: dict[str, Any] = handler(self)
        if self.catalog is None:
            data.pop("catalog", None)
        return data

    def describe(self) -> str:
        target = self.path or str(self.options.get("name", "in-memory table"))
        table = self.options.get("table")
        read = f"{self.kind}:{target}" + (f"#{table}" if table else "")
        if self.catalog is None:
            return read
        return f"catalog:{self.catalog.dataset}@v{self.catalog.version} ({read})"


class NamedExpr(Frozen):
    """An output column defined by a SQL expression: ``NamedExpr(name="x2", expr="x * 2")``."""

    name: str = Field(min_length=1)
    expr: str


class SortKey(Frozen):
    column: str = Field(min_length=1)
    descending: bool = Field(default=False, strict=True)
    nulls_first: bool | None = Field(default=None, strict=True)
    """None means DuckDB's default: nulls last, ascending and descending alike."""


class Scan(Node):
    """Read a source; every row gets a stable ``_rowid``."""

    op: Literal["scan"] = "scan"
    source: SourceSpec
    source_schema: Schema
    columns: tuple[str, ...] | None = None
    """Columns to read; None reads all (a pushed-down projection)."""

    def derive_schema(self) -> Schema:
        if not self.source_schema.columns:
            raise PlanError(
                f"Scan of {self.source.describe()}: source_schema has no columns; a source has at least one"
            )
        if ROW_ID in self.source_schema:
            raise PlanError(f"source {self.source.describe()} already has a column named {ROW_ID!r}; rename it")
        if self.columns is None:
            return Schema(columns=(ROW_ID_COLUMN, *self.source_schema.columns))
        self.source_schema.require(self.columns, f"Scan of {self.source.describe()}")
        kept = tuple(c for c in self.source_schema.columns if c.name in self.columns)
        return Schema(columns=(ROW_ID_COLUMN, *kept))

    def label(self) -> str:
        cols = "" if self.columns is None else f" columns={list(self.columns)}"
        return f"Scan {self.source.describe()}{cols}"


class Unary(Node):
    child_fields: ClassVar[tuple[str, ...]] = ("input",)
    input: PlanNode

    @property
    def input_schema(self) -> Schema:
        return self.input.output_schema


class Filter(Unary):
    """Keep rows where a SQL predicate is true: ``Filter(input=s, predicate="rating >= 4")``."""

    op: Literal["filter"] = "filter"
    predicate: str

    def derive_schema(self) -> Schema:
        kind = expression_type(self.predicate, self.input_schema, "Filter")
        if kind != "BOOLEAN":
            raise PlanError(
                f"Filter: predicate {self.predicate!r} is {kind}, not BOOLEAN; compare it, e.g. '{self.predicate} > 0'"
            )
        return self.input_schema

    def columns_read(self) -> frozenset[str]:
        return frozenset(referenced_columns(parse_expression(self.predicate, "Filter")))

    def drops_rows_only(self) -> bool:
        return True

    def label(self) -> str:
        return f"Filter {self.predicate}"


class Project(Unary):
    """Compute output columns from SQL expressions; ``_rowid`` is always kept."""

    op: Literal["project"] = "project"
    exprs: tuple[NamedExpr, ...]
    row_preserving: ClassVar[bool] = True

    def derive_schema(self) -> Schema:
        if not self.exprs:
            raise PlanError("Project: select at least one column")
        columns = [ROW_ID_COLUMN]
        for item in self.exprs:
            if item.name == ROW_ID:
                raise PlanError(f"Project: {ROW_ID!r} is kept automatically; do not select it")
            columns.append(Column(name=item.name, type=expression_type(item.expr, self.input_schema, "Project")))
        return Schema(columns=tuple(columns))

    def columns_read(self) -> frozenset[str]:
        return frozenset(
            name for item in self.exprs for name in referenced_columns(parse_expression(item.expr, "Project"))
        )

    def label(self) -> str:
        return "Project " + ", ".join(
            item.name if item.expr == item.name else f"{item.expr} AS {item.name}" for item in self.exprs
        )


JoinKind = Literal["inner", "left", "semi", "anti"]


class Join(Node):
    """Relational join on a SQL condition over ``l.column`` and ``r.column``.

    Right-side columns whose names clash with the left get the suffix ``_right``.
    Semi and anti joins output the left columns only.
    """

    op: Literal["join"] = "join"
    child_fields: ClassVar[tuple[str, ...]] = ("left", "right")
    left: PlanNode
    right: PlanNode
    kind: JoinKind = "inner"
    on: str

    def derive_schema(self) -> Schema:
        left, right = self.left.output_schema, self.right.output_schema
        check_join_condition(self.on, left, right, "Join")
        keys, residual = self.keys
        if not keys:
            raise PlanError(f"Join: condition {self.on!r} has no equality between l.<column> and r.<column>; add one")
        if residual is not None and self.kind != "inner":
            raise PlanError(
                f"Join: a {self.kind} join needs a pure equality condition; move {residual!r} into a Filter"
            )
        if self.kind in ("semi", "anti"):
            return left
        return Schema(
            columns=left.columns
            + tuple(Column(name=self.right_names[c.name], type=c.type) for c in right.user_columns())
        )

    def drops_rows_only(self) -> bool:
        return self.kind in ("semi", "anti")

    @property
    def keys(self) -> tuple[tuple[tuple[str, str], ...], str | None]:
        return equi_join_keys(self.on)

    @property
    def right_names(self) -> dict[str, str]:
        """Output name of each right column (clashes with the left get ``_right``)."""
        return right_names(self.left.output_schema, self.right.output_schema)

    def columns_read(self) -> frozenset[str]:
        return frozenset(referenced_columns(parse_expression(self.on, "Join")))

    def label(self) -> str:
        return f"Join {self.kind} on {self.on}"


class Aggregate(Unary):
    """Group by key columns and compute SQL aggregates: ``aggs=(NamedExpr("n", "count(*)"),)``."""

    op: Literal["aggregate"] = "aggregate"
    keys: tuple[str, ...] = ()
    aggs: tuple[NamedExpr, ...]

    def derive_schema(self) -> Schema:
        schema = self.input_schema
        schema.require(self.keys, "Aggregate keys")
        if not self.aggs and not self.keys:
            raise PlanError("Aggregate: give at least one key or aggregate")
        columns = [ROW_ID_COLUMN, *(Column(name=key, type=schema.type_of(key)) for key in self.keys)]
        for item in self.aggs:
            columns.append(Column(name=item.name, type=aggregate_type(item.expr, self.keys, schema, "Aggregate")))
        return Schema(columns=tuple(columns))

    def columns_read(self) -> frozenset[str]:
        read = set(self.keys)
        for item in self.aggs:
            read.update(referenced_columns(parse_expression(item.expr, "Aggregate", "aggregate")))
        return frozenset(read)

    def label(self) -> str:
        aggs = ", ".join(f"{item.expr} AS {item.name}" for item in self.aggs)
        return f"Aggregate by {list(self.keys)}: {aggs}"


class Union(Node):
    """Concatenate inputs with identical column names and types (UNION ALL)."""

    op: Literal["union"] = "union"
    child_fields: ClassVar[tuple[str, ...]] = ("inputs",)
    inputs: tuple[PlanNode, ...]

    def derive_schema(self) -> Schema:
        if len(self.inputs) < 2:
            raise PlanError("Union: give at least two inputs")
        first = self.inputs[0].output_schema
        for position, other in enumerate(self.inputs[1:], start=2):
            if other.output_schema != first:
                raise PlanError(
                    f"Union: input {position} has columns {_render(other.output_schema)}, "
                    f"input 1 has {_render(first)}; project them to the same names and types"
                )
        return first

    def label(self) -> str:
        return f"Union all of {len(self.inputs)}"


class Sort(Unary):
    """Order rows by key columns: ``Sort(input=s, keys=(SortKey(column="rating", descending=True),))``."""

    op: Literal["sort"] = "sort"
    keys: tuple[SortKey, ...]

    def derive_schema(self) -> Schema:
        if not self.keys:
            raise PlanError("Sort: give at least one key")
        self.input_schema.require([key.column for key in self.keys], "Sort")
        return self.input_schema

    def columns_read(self) -> frozenset[str]:
        return frozenset(key.column for key in self.keys)

    def label(self) -> str:
        return "Sort " + ", ".join(key.column + (" DESC" if key.descending else "") for key in self.keys)


class Limit(Unary):
    """Keep the first ``count`` rows after skipping ``offset``: ``Limit(input=s, count=10)``."""

    op: Literal["limit"] = "limit"
    count: int = Field(ge=0, strict=True)
    offset: int = Field(default=0, ge=0, strict=True)

    def derive_schema(self) -> Schema:
        for name, value in (("count", self.count), ("offset", self.offset)):
            if value > INT64_MAX:
                raise PlanError(
                    f"Limit: {name} {value} does not fit in 64 bits (at most {INT64_MAX}), so the plan cannot be "
                    "journaled or resumed (a JSON plan's integers are 64-bit); give a smaller one"
                )
        return self.input_schema

    def label(self) -> str:
        return f"Limit {self.count}" + (f" offset {self.offset}" if self.offset else "")


class Distinct(Unary):
    """Drop duplicate rows (all columns but ``_rowid``); each keeps its smallest row id."""

    op: Literal["distinct"] = "distinct"

    def derive_schema(self) -> Schema:
        return self.input_schema


def _render(schema: Schema) -> str:
    return "(" + ", ".join(f"{c.name} {c.type}" for c in schema.user_columns()) + ")"
