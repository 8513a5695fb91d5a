"""SemCode in the IR: construction, invariants, content addressing, JSON plans and the schema."""

from __future__ import annotations

import json

import pytest

from semray.errors import PlanError, PlanFormatError
from semray.operators import Scan, plan_from_json, plan_json_schema, plan_to_json
from semray.operators.code import CodeExample, SemCode, code_listing, code_sha256
from semray.operators.semantic import ExtractField

CODE = "import pandas as pd\ndef transform(batch):\n    return pd.DataFrame({'stars2': batch['rating'] * 2})\n"


def code_node(reviews: Scan, **overrides: object) -> SemCode:
    fields: dict[str, object] = {
        "input": reviews,
        "instruction": "Twice {rating}",
        "inputs": ("rating",),
        "outputs": (ExtractField(name="stars2", type="int"),),
    }
    return SemCode(**{**fields, **overrides})  # type: ignore[arg-type]


def test_outputs_are_appended_typed(reviews: Scan) -> None:
    node = code_node(reviews)
    assert node.output_schema.names[-1] == "stars2" and node.output_schema.type_of("stars2") == "BIGINT"
    assert node.columns_read() == {"rating"} and node.row_preserving and not node.calls_llm
    assert not node.committed and "no code yet" in node.label()


def test_supplied_code_is_content_addressed(reviews: Scan) -> None:
    node = code_node(reviews, code=CODE)
    assert node.code_sha256 == code_sha256(CODE) and node.origin == "user"
    assert f"code {code_sha256(CODE)[:12]} (user code); runs sandboxed, CPU only" in node.label()
    assert "sha256:" + code_sha256(CODE) in code_listing(node) and "def transform(batch):" in code_listing(node)


def test_json_round_trip_keeps_code_and_hash(reviews: Scan) -> None:
    example = CodeExample(inputs={"rating": 2}, outputs={"stars2": 4})
    node = code_node(reviews, code=CODE, examples=(example,))
    again = plan_from_json(plan_to_json(node))
    assert again == node and hash(again) == hash(node)


def test_edited_code_with_its_old_hash_is_refused(reviews: Scan) -> None:
    document = json.loads(plan_to_json(code_node(reviews, code=CODE)))
    document["plan"]["code"] = CODE.replace("* 2", "* 3")
    with pytest.raises(PlanFormatError, match=r"plan\.sem_code\.code_sha256: .*changed after it was committed"):
        plan_from_json(json.dumps(document))


def test_the_published_schema_knows_sem_code() -> None:
    schema = json.dumps(plan_json_schema())
    assert '"sem_code"' in schema and "code_sha256" in schema


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"inputs": ()}, "at least one input column"),
        ({"inputs": ("ratin",)}, "did you mean 'rating'"),
        ({"instruction": "Twice {review}"}, "not inputs"),
        ({"outputs": ()}, "at least one output column"),
        ({"outputs": (ExtractField(name="rating", type="int"),)}, "already exists"),
        ({"code": "def convert(batch):\n    return batch\n"}, "defines no top-level function transform"),
        ({"code": "def transform(batch) return"}, "does not parse"),
        ({"code_sha256": "abc"}, "a code hash without code"),
        ({"agreement": 0.9}, "without code leave them out"),
        ({"agreement_bound": 0.9}, "without code leave them out"),
        ({"checked_rows": 20}, "without code leave them out"),
        ({"sample_rows": 40, "max_sample_rows": 20}, "is below sample_rows"),
        ({"examples": (CodeExample(inputs={"review": "x"}, outputs={"stars2": 1}),)}, "give exactly the inputs"),
    ],
)
def test_invalid_nodes_say_what_to_fix(reviews: Scan, overrides: dict[str, object], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        code_node(reviews, **overrides)
