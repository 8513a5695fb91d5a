"""The plan node union: every logical operator, discriminated by ``op``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from semray.operators.code import SemCode
from semray.operators.relational import Aggregate, Distinct, Filter, Join, Limit, Project, Scan, Sort, Union
from semray.operators.semantic import SemAgg, SemClassify, SemExtract, SemFilter, SemJoin, SemMap, SemSearch, SemTopK

RELATIONAL = (Scan, Filter, Project, Join, Aggregate, Union, Sort, Limit, Distinct)
SEMANTIC = (SemFilter, SemMap, SemExtract, SemClassify, SemJoin, SemTopK, SemAgg, SemSearch, SemCode)
OPERATORS = RELATIONAL + SEMANTIC

PlanNode = Annotated[
    Scan
    | Filter
    | Project
    | Join
    | Aggregate
    | Union
    | Sort
    | Limit
    | Distinct
    | SemFilter
    | SemMap
    | SemExtract
    | SemClassify
    | SemJoin
    | SemTopK
    | SemAgg
    | SemSearch
    | SemCode,
    Field(discriminator="op"),
]

for _operator in OPERATORS:
    _operator.model_rebuild(_types_namespace={"PlanNode": PlanNode})
