"""Strict reply parsing, the format instructions and cell rendering (pure unit tests)."""

from __future__ import annotations

import pytest

from semray.serving.contract import ModelRequest, OutputConstraint, confidence_from_logprobs
from semray.serving.parsing import ReplyParseError, parse_reply
from semray.serving.prompts import format_instruction, render_prompt, repair_prompt

YES_NO = OutputConstraint.choice("Yes", "No")
PERSON = OutputConstraint.schema(
    {"type": "object", "properties": {"city": {"type": "string"}, "age": {"type": "integer"}}, "required": ["city"]}
)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Yes", "Yes"),
        (" yes.\n", "Yes"),
        ('"No"', "No"),
        ("Reasoning: it says so.\nAnswer: No", "No"),
        ("True", "Yes"),
        ("false", "No"),
        ('{"answer": "Yes"}', "Yes"),
    ],
)
def test_choice_replies_parse_to_the_canonical_option(reply: str, expected: str) -> None:
    assert parse_reply(reply, YES_NO) == expected


@pytest.mark.parametrize("reply", ["Maybe", "Yes and no", "", "The answer is clearly yes because"])
def test_choice_replies_outside_the_options_are_rejected(reply: str) -> None:
    with pytest.raises(ReplyParseError, match="not exactly one of"):
        parse_reply(reply, YES_NO)


def test_boolean_synonyms_only_apply_to_boolean_pairs() -> None:
    labels = OutputConstraint.choice("positive", "negative")
    with pytest.raises(ReplyParseError):
        parse_reply("yes", labels)
    assert parse_reply("Positive", labels) == "positive"


def test_json_replies_are_validated_against_the_schema() -> None:
    assert parse_reply('{"city": "Oslo", "age": 3}', PERSON) == {"city": "Oslo", "age": 3}
    assert parse_reply('Here you go:\n```json\n{"city": "Oslo"}\n```', PERSON) == {"city": "Oslo"}
    with pytest.raises(ReplyParseError, match="at age"):
        parse_reply('{"city": "Oslo", "age": "three"}', PERSON)
    with pytest.raises(ReplyParseError, match="not valid JSON"):
        parse_reply("{city: Oslo}", PERSON)
    with pytest.raises(ReplyParseError, match="required"):
        parse_reply("{}", PERSON)


def test_json_is_never_evaluated_as_python() -> None:
    with pytest.raises(ReplyParseError):
        parse_reply("{'city': __import__('os').getcwd()}", PERSON)


def test_text_replies_are_stripped_and_must_not_be_empty() -> None:
    assert parse_reply("  a summary \n", OutputConstraint.text()) == "a summary"
    with pytest.raises(ReplyParseError):
        parse_reply("   ", OutputConstraint.text())


def test_format_instruction_lists_options_unless_the_prompt_names_them() -> None:
    assert "Yes, No" in (format_instruction(YES_NO, native_json=True) or "")
    assert format_instruction(YES_NO, native_json=True, prompt="Answer yes or no.") == (
        "Respond with the option only, and nothing else."
    )
    assert format_instruction(PERSON, native_json=True) is None
    assert "JSON schema" in (format_instruction(PERSON, native_json=False) or "")
    assert format_instruction(OutputConstraint.text(), native_json=False) is None


def test_repair_prompt_quotes_the_reply_and_the_reason() -> None:
    text = repair_prompt("Is it good?", "Maybe", "it is not an option", YES_NO)
    assert text.startswith("Is it good?") and "Maybe" in text and "it is not an option" in text


def test_render_prompt_flags_null_empty_and_non_string_cells() -> None:
    assert render_prompt("{a} and {b}", {"a": "x", "b": "y"}).problem is None
    assert render_prompt("{a}", {"a": None}).problem == "empty_input: column 'a' is null"
    assert render_prompt("{a}", {"a": float("nan")}).problem == "empty_input: column 'a' is null"
    assert (render_prompt("{a}", {"a": "  "}).problem or "").startswith("empty_input")
    assert (render_prompt("{a}", {"a": 3}).problem or "").startswith("non_string_input")
    assert render_prompt("{a}", {"a": 3}, allow_non_string=True).text == "3"
    assert render_prompt("{a}", {"a": b"bytes"}).text == "bytes"


def test_non_string_prompts_become_input_errors_not_validation_errors() -> None:
    request = ModelRequest.model_validate({"prompt": None, "constraint": YES_NO})
    assert request.prompt == "" and (request.input_error or "").startswith("non_string_input")
    assert ModelRequest.model_validate({"prompt": 4.5}).input_error == "non_string_input: got float"


def test_constraints_check_their_arguments() -> None:
    with pytest.raises(ValueError, match="at least one choice"):
        OutputConstraint(kind="choice")
    with pytest.raises(ValueError, match="JSON schema"):
        OutputConstraint(kind="json_schema")


def test_confidence_is_exp_of_mean_logprob() -> None:
    assert confidence_from_logprobs(()) is None
    assert confidence_from_logprobs((0.0, 0.0)) == 1.0
