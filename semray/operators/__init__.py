"""The plan IR: frozen logical operators, SQL expressions, schemas and JSON plans."""

from semray.operators.base import Node, transform, walk
from semray.operators.code import CodeExample, SandboxLimits, SemCode
from semray.operators.explain import render_tree
from semray.operators.field_specs import parse_fields
from semray.operators.plan import OPERATORS, RELATIONAL, SEMANTIC, PlanNode
from semray.operators.relational import (
    Aggregate,
    Distinct,
    Filter,
    Join,
    Limit,
    NamedExpr,
    Project,
    Scan,
    Sort,
    SortKey,
    SourceSpec,
    Union,
)
from semray.operators.schema import ROW_ID, Column, Schema
from semray.operators.semantic import (
    ExtractField,
    SemAgg,
    SemClassify,
    SemExtract,
    SemFilter,
    SemJoin,
    SemMap,
    SemSearch,
    SemTopK,
)
from semray.operators.serialize import PLAN_VERSION, plan_from_json, plan_json_schema, plan_to_json

__all__ = [
    "OPERATORS",
    "PLAN_VERSION",
    "RELATIONAL",
    "ROW_ID",
    "SEMANTIC",
    "Aggregate",
    "CodeExample",
    "Column",
    "Distinct",
    "ExtractField",
    "Filter",
    "Join",
    "Limit",
    "NamedExpr",
    "Node",
    "PlanNode",
    "Project",
    "SandboxLimits",
    "Scan",
    "Schema",
    "SemAgg",
    "SemClassify",
    "SemCode",
    "SemExtract",
    "SemFilter",
    "SemJoin",
    "SemMap",
    "SemSearch",
    "SemTopK",
    "Sort",
    "SortKey",
    "SourceSpec",
    "Union",
    "parse_fields",
    "plan_from_json",
    "plan_json_schema",
    "plan_to_json",
    "render_tree",
    "transform",
    "walk",
]
