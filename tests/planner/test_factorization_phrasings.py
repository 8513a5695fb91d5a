"""The factorization detectors on many phrasings: the exact forms rule 7 applies, the forms left
to verification, free-form wordings, and what neither may take ("similar topic")."""

from __future__ import annotations

import pytest

from semray.operators import Scan, Schema, SourceSpec
from semray.operators.semantic import SemJoin
from semray.planner.join_factors import detect_factorization, find_factorization
from semray.planner.rules.factorize_semantic_joins import factorize_semantic_joins


@pytest.mark.parametrize(
    ("instruction", "factor", "relation", "exact"),
    [
        ("{l.a} and {r.b} have the same sentiment", "sentiment", "=", True),
        ("Are {l.a} and {r.b} on the same subject?", "subject", "=", True),
        ("{l.a} and {r.b} have different sentiments", "sentiments", "<>", True),
        ("Do {l.a} and {r.b} differ in their product category?", "product category", "<>", True),
        ("{l.a} has a different author from {r.b}.", "author", "<>", True),
        ("{l.a} and {r.b} do not have the same diagnosis", "diagnosis", "<>", True),
        ("{r.b} does not share the same language as {l.a}", "language", "<>", True),
        ("{l.a} and {r.b} have opposite sentiment", "sentiment", "<>", False),
        ("{l.a} has the opposite stance to {r.b}", "stance", "<>", False),
        ("Is {l.a} more urgent than {r.b}?", "urgent", ">", False),
        ("{r.b} is more formal than {l.a}", "formal", "<", False),
        ("{l.a} is less positive than {r.b}", "positive", "<", False),
        ("{l.a} has a higher price than {r.b}", "price", ">", False),
        ("{r.b} has a lower risk score than {l.a}", "risk score", ">", False),
    ],
)
def test_detected_forms(instruction: str, factor: str, relation: str, exact: bool) -> None:
    found = detect_factorization(instruction)
    assert found is not None and (found.factor, found.relation, found.exact) == (factor, relation, exact)


@pytest.mark.parametrize(
    ("instruction", "factor", "relation"),
    [
        (
            "Here is one customer note: {l.t}. Here is another one: {r.t}. "
            "Answer yes if both notes express the same sentiment, and no otherwise.",
            "sentiment",
            "=",
        ),
        (
            "First ticket:\n{l.t}\n\nSecond ticket:\n{r.t}\n\nWere both filed about the same product line?",
            "product line",
            "=",
        ),
        ("Read {l.t}, then {r.t}. Do the two notes differ in tone? Yes or no.", "tone", "<>"),
        ("Consider {l.t} and {r.t}. They are written in different languages, true or false?", "languages", "<>"),
        (
            "Take the text {l.t}. Take the text {r.t}. Are they not from the same author? Answer no otherwise.",
            "author",
            "<>",
        ),
        (
            "You get two abstracts. A: {l.t} B: {r.t}. Do A and B belong to the same research field?",
            "research field",
            "=",
        ),
    ],
)
def test_free_form_wordings(instruction: str, factor: str, relation: str) -> None:
    found = find_factorization(instruction)
    assert found is not None and (found.factor, found.relation, found.exact) == (factor, relation, False)
    assert detect_factorization(instruction) is None  # only verification may use these


@pytest.mark.parametrize(
    "instruction",
    [
        "{l.a} and {r.b} have a similar topic",
        "Are {l.a} and {r.b} about a similar topic?",
        "{l.a} and {r.b} are related",
        "{l.a} mentions {r.b}",
        "{l.a} matches {r.b}",
        "{l.a} {l.c} and {r.b} have the same topic",
        "{l.a} and {r.b} have the same or similar topic",
        "Here is {l.t} and {r.t}. Do they have the same author but a different topic?",
        "Here is {l.t} and {r.t}. They do not have different topics, do they?",
        "Here is {l.t} and {r.t}. Are they roughly the same length?",
        "Here is {l.t} and {r.t}. Is the first one a reply to the second?",
        "{l.t} and {r.t} never share the same topic",
    ],
)
def test_left_alone(instruction: str) -> None:
    assert detect_factorization(instruction) is None and find_factorization(instruction) is None


def side(path: str) -> Scan:
    return Scan(source=SourceSpec(kind="csv", path=path), source_schema=Schema.of(("a", "VARCHAR")))


@pytest.mark.parametrize(
    ("instruction", "implementation", "relation"),
    [
        ("{l.a} and {r.a} differ in topic", "factorized", "<>"),
        ("{l.a} and {r.a} have the same topic", "factorized", "="),
        ("{l.a} is more urgent than {r.a}", "auto", "="),  # ordered: verified first, not by the rule
        ("{l.a} and {r.a} have opposite sentiment", "auto", "="),
    ],
)
def test_rule_7_applies_only_exact_forms(instruction: str, implementation: str, relation: str) -> None:
    join = factorize_semantic_joins(SemJoin(left=side("/x.csv"), right=side("/y.csv"), instruction=instruction))
    assert isinstance(join, SemJoin) and (join.implementation, join.relation) == (implementation, relation)
