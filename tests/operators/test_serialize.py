"""JSON plans: round trips for every operator, the published schema, clear errors."""

from __future__ import annotations

import json

import jsonschema
import pytest

from semray.errors import PlanFormatError
from semray.operators import (
    OPERATORS,
    Aggregate,
    Distinct,
    ExtractField,
    Filter,
    Join,
    Limit,
    NamedExpr,
    Node,
    Project,
    Scan,
    SemAgg,
    SemClassify,
    SemExtract,
    SemFilter,
    SemJoin,
    SemMap,
    SemSearch,
    SemTopK,
    Sort,
    SortKey,
    Union,
    plan_from_json,
    plan_json_schema,
    plan_to_json,
)
from semray.operators.code import CodeExample, SemCode


def one_of_each(reviews: Scan, products: Scan) -> list[Node]:
    return [
        reviews,
        Filter(input=reviews, predicate="rating >= 4"),
        Project(input=reviews, exprs=(NamedExpr(name="r", expr="rating + 1"),)),
        Join(left=reviews, right=products, kind="left", on="l.product = r.product"),
        Aggregate(input=reviews, keys=("product",), aggs=(NamedExpr(name="n", expr="count(*)"),)),
        Union(inputs=(reviews, reviews)),
        Sort(input=reviews, keys=(SortKey(column="rating", descending=True, nulls_first=True),)),
        Limit(input=reviews, count=5, offset=2),
        Distinct(input=reviews),
        SemFilter(input=reviews, instruction="{review} is positive", tier="small"),
        SemMap(input=reviews, instruction="score {review}", output="s", output_type="int", lo=1, hi=5),
        SemExtract(input=reviews, instruction="{review}", fields=(ExtractField(name="issue"),)),
        SemClassify(input=reviews, instruction="{review}", labels=("a", "b")),
        SemJoin(left=reviews, right=products, instruction="{l.review} mentions {r.product}", implementation="blocked"),
        SemTopK(input=reviews, instruction="{review} is funny", k=2),
        SemAgg(input=reviews, instruction="summarise {review}", keys=("product",)),
        SemSearch(input=reviews, column="review", query="late", k=3, mode="hybrid"),
        SemCode(
            input=reviews,
            instruction="Twice {rating}",
            inputs=("rating",),
            outputs=(ExtractField(name="twice", type="int"),),
            examples=(CodeExample(inputs={"rating": 2}, outputs={"twice": 4}),),
            code="def transform(batch):\n    return batch.assign(twice=batch['rating'] * 2)[['twice']]\n",
        ),
    ]


def test_every_operator_round_trips(reviews: Scan, products: Scan) -> None:
    plans = one_of_each(reviews, products)
    assert {type(plan) for plan in plans} == set(OPERATORS)
    schema = plan_json_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    for plan in plans:
        text = plan_to_json(plan)
        validator.validate(json.loads(text))
        assert plan_from_json(text) == plan


def test_old_version_is_rejected_with_advice(reviews: Scan) -> None:
    document = json.loads(plan_to_json(reviews))
    document["version"] = 0
    with pytest.raises(PlanFormatError, match="version 0 is not supported"):
        plan_from_json(json.dumps(document))


def test_malformed_plan_names_the_path(reviews: Scan) -> None:
    document = json.loads(plan_to_json(Filter(input=reviews, predicate="rating > 1")))
    del document["plan"]["input"]["source"]["kind"]
    with pytest.raises(PlanFormatError, match=r"at plan\.filter\.input\.scan\.source\.kind: Field required"):
        plan_from_json(json.dumps(document))


def test_invalid_json_and_wrong_shape() -> None:
    with pytest.raises(PlanFormatError, match="not valid JSON"):
        plan_from_json("{")
    with pytest.raises(PlanFormatError, match='"version": 1'):
        plan_from_json("[]")


def test_semantic_errors_surface_from_json(reviews: Scan) -> None:
    document = json.loads(plan_to_json(Filter(input=reviews, predicate="rating > 1")))
    document["plan"]["predicate"] = "ratin > 1"
    with pytest.raises(Exception, match="did you mean 'rating'"):
        plan_from_json(json.dumps(document))


def test_schema_is_versioned() -> None:
    schema = plan_json_schema()
    assert schema["$id"].endswith("plan-v1.json")
    assert schema["properties"]["version"]["const"] == 1
