"""The conservative "same X" detector of rule 7: what it accepts and what it leaves alone."""

from __future__ import annotations

import pytest

from semray.planner.rules.factorize_semantic_joins import shared_property


@pytest.mark.parametrize(
    ("instruction", "prop"),
    [
        ("{l.review} and {r.review} have the same sentiment", "sentiment"),
        ("Do {l.a} and {r.b} share the same product category?", "product category"),
        ("{r.b} and {l.a} are about the same topic.", "topic"),
        ("{l.a} has the same sentiment as {r.b}", "sentiment"),
        ("Is {l.title} about the same topic as {r.abstract}?", "topic"),
        ("{l.a} and {r.b} are in the same department", "department"),
    ],
)
def test_accepted_phrasings(instruction: str, prop: str) -> None:
    assert shared_property(instruction) == prop


@pytest.mark.parametrize(
    "instruction",
    [
        "{l.a} is more positive than {r.b}",
        "{l.a} and {r.b} do not have the same sentiment",
        "{l.a} and {r.b} have the same or similar topic",
        "{l.a} and {r.b} have the same sentiment and {l.c} mentions {r.b}",
        "{l.a} matches {r.b}",
        "{l.a} {l.c} and {r.b} have the same topic",
        "{l.a} and {r.b} have a similar topic",
    ],
)
def test_left_alone(instruction: str) -> None:
    assert shared_property(instruction) is None
