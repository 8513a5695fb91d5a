"""propose_sections: recorded model replies (good, malformed, hallucinated, out of order) and the fallback."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

import pytest
from segment_checks import check_segmentation
from structlog.testing import capture_logs

from semray.catalog.section_proposals import propose_sections
from semray.catalog.segments import Segment, segment_document
from semray.serving.prompts.sections import SECTIONS_PROMPT_VERSION
from semray.sources.documents import DocumentText

TEXT = (
    "Hi team,\nthe offsite is on Friday at the lake house.\n\nBring boots.\n\n"
    "On the budget: we are 10% over plan\nfor Q3, mostly travel.\n\nCheers, Ann"
)
DOCUMENT = DocumentText(TEXT, "text", "utf-8")


def reply(*sections: tuple[str, str]) -> str:
    return json.dumps({"sections": [{"title": title, "first_words": words} for title, words in sections]})


class Recorded:
    """A ``generate`` that answers one recorded reply and keeps the prompts it was sent."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.answer


def propose(answer: str, document: DocumentText = DOCUMENT) -> tuple[Segment, Recorded, list[MutableMapping[str, Any]]]:
    generate = Recorded(answer)
    with capture_logs() as logs:
        root = propose_sections(document, generate, title="memo.txt", max_chunk_chars=40)
    check_segmentation(document, root, "memo.txt")
    return root, generate, logs


def test_a_good_reply_gives_sections_at_its_first_words() -> None:
    good = reply(("Offsite", "the offsite is on"), ("Budget", "On the   budget: we\nare"), ("Sign-off", "Cheers, Ann"))
    root, generate, logs = propose(good)
    assert [(child.level, child.path[-1]) for child in root.children] == [
        ("paragraph", "memo.txt"),
        ("section", "Offsite"),
        ("section", "Budget"),
        ("section", "Sign-off"),
    ]
    assert root.children[0].text == "Hi team,"
    budget = root.children[2]
    assert budget.text.startswith("On the budget") and budget.text.endswith("mostly travel.")
    assert [child.level for child in budget.children] == ["paragraph"]
    assert [chunk.text for chunk in budget.children[0].children] == [
        "On the budget: we are 10% over plan",
        "for Q3, mostly travel.",
    ]
    assert "Title: memo.txt" in generate.prompts[0] and "Bring boots." in generate.prompts[0]
    assert "JSON schema" in generate.prompts[0]
    assert [entry["event"] for entry in logs] == ["section_proposal_accepted"]
    assert logs[0]["prompt"] == SECTIONS_PROMPT_VERSION


def test_a_fenced_reply_is_accepted() -> None:
    root, _, _ = propose("```json\n" + reply(("All", "Hi team")) + "\n```")
    assert [child.path for child in root.children] == [("memo.txt", "All")]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("Sure! Here are the sections: Offsite, Budget.", "not valid JSON"),
        ('{"sections": [{"title": "Offsite"}]}', "does not match the schema"),
        ('{"sections": []}', "proposes no sections"),
        (reply(("Offsite", "the offsite is on"), ("Party", "Let us celebrate the launch")), "do not occur in the text"),
        (reply(("Budget", "On the budget"), ("Offsite", "the offsite is on")), "occur only before the previous"),
        (reply(("Budget", "On the budget: we"), ("Overlap", "budget: we are 10%")), "overlap the previous section"),
    ],
)
def test_a_bad_reply_falls_back_to_the_structure_with_the_reason_logged(answer: str, reason: str) -> None:
    root, _, logs = propose(answer)
    assert root == segment_document(DOCUMENT, title="memo.txt", max_chunk_chars=40)
    (entry,) = logs
    assert entry["event"] == "section_proposal_rejected" and reason in str(entry["reason"])


def test_first_words_must_start_at_a_word() -> None:
    _, _, logs = propose(reply(("Part", "10% over plan")))
    assert logs[0]["event"] == "section_proposal_accepted"
    _, _, logs = propose(reply(("Part", "ffsite is on")))
    assert logs[0]["event"] == "section_proposal_rejected" and "do not occur" in str(logs[0]["reason"])


def test_documents_with_headings_or_without_text_are_not_sent() -> None:
    for document in (DocumentText("# Plan\n\ntext", "markdown", "utf-8"), DocumentText(" \n", "text", "utf-8")):
        root, generate, logs = propose(reply(("x", "text")), document)
        assert generate.prompts == []
        assert root == segment_document(document, title="memo.txt", max_chunk_chars=40)
        assert [entry["event"] for entry in logs] == ["section_proposal_skipped"]


def test_only_a_prefix_of_a_long_document_is_sent() -> None:
    document = DocumentText("word " * 5000, "text", "utf-8")
    generate = Recorded(reply(("All", "word word")))
    propose_sections(document, generate, title="long.txt", max_prompt_chars=1000)
    assert len(generate.prompts[0]) < 2500
