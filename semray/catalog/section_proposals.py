"""The optional model pass: sections proposed by a model for a document without headings.

``propose_sections`` sends ``serving/prompts/sections.py``'s prompt (the document's first
``max_prompt_chars`` characters) to ``generate`` and parses the reply strictly: JSON matching
``SECTIONS_SCHEMA`` (``serving.parsing``), then each section's first words looked up in the text
(whitespace may differ, words may not), each after the previous one. A reply that is not such
JSON, names no section, or gives first words that do not occur in the text, occur only before
the previous section's, or overlap them, is rejected: the result is then the structural
segmentation, with the reason logged (``section_proposal_rejected``). A document that has
headings of its own, or no text, is never sent (``section_proposal_skipped``).

>>> from semray.sources.documents import DocumentText
>>> document = DocumentText("Dear all, lunch is at noon.\\n\\nBudget: we are over.", "text", "utf-8")
>>> reply = '''{"sections": [{"title": "Lunch", "first_words": "Dear all"},
...                          {"title": "Money", "first_words": "Budget:"}]}'''
>>> [s.path for s in propose_sections(document, lambda prompt: reply, title="memo").children]
[('memo', 'Lunch'), ('memo', 'Money')]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from semray.catalog.headings import Heading
from semray.catalog.segments import Segment, segment_document, segment_sections
from semray.log import get_logger
from semray.serving.parsing import ReplyParseError, parse_reply
from semray.serving.prompts.sections import SECTIONS_CONSTRAINT, SECTIONS_PROMPT_VERSION, sections_prompt
from semray.sources.documents import DocumentText

log = get_logger(__name__)

DEFAULT_PROMPT_CHARS = 12_000
"""The document prefix shown to the model; the last proposed section runs to the end of the text."""


class ProposalRejected(ValueError):
    """A model's section proposal cannot be used; the message says why (and is logged)."""


def propose_sections(
    document: DocumentText,
    generate: Callable[[str], str],
    *,
    title: str,
    max_chunk_chars: int = 1000,
    max_prompt_chars: int = DEFAULT_PROMPT_CHARS,
) -> Segment:
    """The hierarchy of ``document`` with sections a model proposed, or the structural one."""
    structural = segment_document(document, title=title, max_chunk_chars=max_chunk_chars)
    if any(child.level == "section" for child in structural.children) or not structural.text:
        reason = "the document has headings" if structural.text else "the document is empty"
        log.info("section_proposal_skipped", title=title, reason=reason)
        return structural
    reply = generate(sections_prompt(title, document.text[:max_prompt_chars]))
    try:
        boundaries = parse_boundaries(reply, document.text)
    except (ReplyParseError, ProposalRejected) as error:
        log.warning("section_proposal_rejected", title=title, reason=str(error), prompt=SECTIONS_PROMPT_VERSION)
        return structural
    log.info("section_proposal_accepted", title=title, sections=len(boundaries), prompt=SECTIONS_PROMPT_VERSION)
    return segment_sections(document, boundaries, title=title, max_chunk_chars=max_chunk_chars)


def parse_boundaries(reply: str, text: str) -> list[Heading]:
    """The sections of a model's ``reply`` as zero-width level-1 headings at their first words in ``text``.

    Raises ReplyParseError for a reply that is not JSON of the schema, ProposalRejected for
    first words that cannot be placed.
    """
    value = parse_reply(reply, SECTIONS_CONSTRAINT)
    sections: Sequence[dict[str, Any]] = value["sections"] if isinstance(value, dict) else []
    if not sections:
        raise ProposalRejected("the reply proposes no sections")
    headings: list[Heading] = []
    previous_end = 0
    for number, section in enumerate(sections, 1):
        title = " ".join(str(section["title"]).split())
        pattern = _words_pattern(str(section["first_words"]))
        if not title or pattern is None:
            raise ProposalRejected(f"section {number} has an empty title or no first words")
        after = headings[-1].start + 1 if headings else 0
        match = pattern.search(text, after)
        if match is None:
            where = "occur only before the previous section's" if pattern.search(text) else "do not occur in the text"
            raise ProposalRejected(f"the first words of section {number} ({title!r}) {where}")
        if match.start() < previous_end:
            raise ProposalRejected(f"the first words of section {number} ({title!r}) overlap the previous section's")
        headings.append(Heading(1, title, match.start(), match.start()))
        previous_end = match.end()
    return headings


def _words_pattern(first_words: str) -> re.Pattern[str] | None:
    """A pattern for ``first_words`` with any whitespace between words, starting at a word boundary."""
    words = first_words.split()
    if not words:
        return None
    boundary = r"(?<!\w)" if words[0][0].isalnum() else ""
    return re.compile(boundary + r"\s+".join(re.escape(word) for word in words))
