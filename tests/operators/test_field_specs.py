"""The one grammar of typed field lists (``semray.operators.field_specs``), as the Python
builders read it; tests/sql/test_sql_field_specs.py checks SQL reads it the same way."""

from __future__ import annotations

import pytest

from semray.errors import PlanError
from semray.operators import ExtractField, parse_fields
from semray.operators.field_specs import FieldSpecError, parse_value_type


def test_types_default_to_text_and_sql_synonyms_name_value_types() -> None:
    fields = parse_fields("sender, subject:, amount: DOUBLE, count: integer, id: BigInt, paid: boolean, note: varchar")
    assert fields == (
        ExtractField(name="sender"),
        ExtractField(name="subject"),
        ExtractField(name="amount", type="float"),
        ExtractField(name="count", type="int"),
        ExtractField(name="id", type="int"),
        ExtractField(name="paid", type="bool"),
        ExtractField(name="note", type="text"),
    )


@pytest.mark.parametrize(
    ("name", "kind"),
    [("text", "text"), ("STRING", "text"), (" str ", "text"), ("number", "float"), ("real", "float"),
     ("decimal", "float"), ("Date", "date"), ("bool", "bool")],
)  # fmt: skip
def test_every_synonym_in_any_case(name: str, kind: str) -> None:
    assert parse_value_type(name) == kind
    assert parse_fields(f"x: {name}") == (ExtractField(name="x", type=kind),)  # type: ignore[arg-type]


def test_names_are_any_text_without_a_comma_or_colon() -> None:
    assert parse_fields(" first name : int , _rest") == (
        ExtractField(name="first name", type="int"),
        ExtractField(name="_rest"),
    )


def test_an_empty_field_is_refused_with_how_to_write_one() -> None:
    with pytest.raises(PlanError, match=r"SemExtract: empty field in 'a,,b'; write 'name: type, \.\.\.'") as caught:
        parse_fields("a,,b")
    assert isinstance(caught.value, FieldSpecError)
    assert caught.value.what == "the field spec ''"


def test_an_unknown_type_is_refused_naming_the_value_types() -> None:
    with pytest.raises(FieldSpecError, match=r"field 'who' has type 'person'; use one of text, int, float, bool, date"):
        parse_fields("who: person")
    with pytest.raises(FieldSpecError, match="double precision"):
        parse_fields("amount: double precision")


def test_a_forgotten_colon_before_a_type_is_refused_with_the_fix() -> None:
    with pytest.raises(FieldSpecError, match="did you mean 'amount: float'"):
        parse_fields("sender, amount float")
    # Names that merely end in a word that is also a type stay names.
    assert [field.name for field in parse_fields("start date, order number")] == ["start date", "order number"]
