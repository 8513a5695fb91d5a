"""The plan node union: every logical operator, discriminated by ``op``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from semray.operators.base import Node
from semray.operators.code import SemCode
from semray.operators.relational import Aggregate, Distinct, Filter, Join, Limit, Project, Scan, Sort, Union
from semray.operators.semantic import (
    SemAgg,
    Semantic,
    SemClassify,
    SemExtract,
    SemFilter,
    SemJoin,
    SemMap,
    SemSearch,
    SemTopK,
)

RELATIONAL = (Scan, Filter, Project, Join, Aggregate, Union, Sort, Limit, Distinct)
SEMANTIC = (SemFilter, SemMap, SemExtract, SemClassify, SemJoin, SemTopK, SemAgg, SemSearch, SemCode)
OPERATORS = RELATIONAL + SEMANTIC


def _row_semantic(operators: tuple[type[Node], ...]) -> tuple[type[Semantic], ...]:
    return tuple(node for node in operators if issubclass(node, Semantic) and node.row_wise and node.calls_llm)


ROW_SEMANTIC = _row_semantic(SEMANTIC)
"""The semantic operators that ask a language model about each row on its own (``is_row_semantic``):
SemFilter, SemMap, SemExtract, SemClassify. Lowering and the cost model take them from here."""

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
