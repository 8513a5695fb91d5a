"""The ingest's optional model pass: the LLM tier proposes sections for documents without headings.

``SectionWriter`` is what ``document_pipeline.DocumentReader`` segments with when an ingest asks
for it (``add_server(..., sections=SectionWriter.from_tier(serving))``, ``semray catalog add PATH
--propose-sections``): a document with headings of its own, or no text, is segmented by its
structure and never sent; any other is sent once (``section_proposals.propose_sections``: the
document's first 12,000 characters, a strict JSON reply whose first words must occur in order),
and a reply that cannot be used leaves the structural segmentation, with the reason logged. A
failed call (the tier's error) counts as such a reply. The writer is plain data (the serving config
and the tier's name, or recorded replies), so Ray ships it to the reading actors.

Each reply is asked with the request id ``sections:<document id>``; ``SectionWriter.replaying``
answers from a recording of those (tests, and a run without a model).

>>> writer = SectionWriter.replaying({"sections:memo.txt": '{"sections": []}'})
>>> writer.reply("memo.txt", "Divide ...")
'{"sections": []}'
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from semray.catalog.section_proposals import propose_sections
from semray.catalog.segments import Segment
from semray.catalog.summaries import llm_tier_name
from semray.catalog.tier_calls import generate_with_tier
from semray.errors import CatalogError
from semray.log import get_logger
from semray.serving.config import ServingConfig
from semray.serving.contract import ModelRequest
from semray.serving.prompts.sections import SECTIONS_CONSTRAINT
from semray.sources.documents import DocumentText

log = get_logger(__name__)

SECTIONS_MAX_TOKENS = 1024
"""Room for about forty sections of a title and ten first words each."""


class SectionsNeedModelError(CatalogError):
    """Sections were asked of a model, but the profile's LLM tiers are simulated."""


@dataclass(frozen=True, slots=True)
class SectionWriter:
    """Proposes sections with ``config``'s tier ``tier``, or answers from ``recorded`` replies."""

    config: ServingConfig | None = None
    tier: str | None = None
    recorded: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_tier(cls, config: ServingConfig) -> SectionWriter:
        """The first real LLM tier of ``config`` (small, then large); ``SectionsNeedModelError`` if none."""
        tier = llm_tier_name(config)
        if tier is None:
            raise SectionsNeedModelError(
                "proposing sections needs a real LLM tier: the small and large tiers are simulated, and the "
                "simulator answers labelled tasks, it cannot read a document. Configure one with --models FILE "
                '(e.g. [small] backend = "openai"), or add the folder without --propose-sections'
            )
        return cls(config=config, tier=tier)

    @classmethod
    def replaying(cls, replies: Mapping[str, str]) -> SectionWriter:
        """Answers from ``replies`` (request id -> reply text); a document with none keeps its structure."""
        return cls(recorded=dict(replies))

    def segment(self, document: DocumentText, *, title: str, max_chunk_chars: int) -> Segment:
        """``document``'s hierarchy, with proposed sections where it has no headings of its own."""
        return propose_sections(
            document, lambda prompt: self.reply(title, prompt), title=title, max_chunk_chars=max_chunk_chars
        )

    def reply(self, document_id: str, prompt: str) -> str:
        """The model's reply to ``prompt`` for ``document_id`` ("" when the call failed)."""
        request_id = f"sections:{document_id}"
        if self.config is None or self.tier is None:
            return self.recorded.get(request_id, "")
        request = ModelRequest(
            prompt=prompt,
            constraint=SECTIONS_CONSTRAINT,
            max_tokens=SECTIONS_MAX_TOKENS,
            logprobs=False,
            request_id=request_id,
        )
        (response,) = asyncio.run(generate_with_tier(self.config, self.tier, [request]))
        if not response.ok:
            log.warning("section_proposal_call_failed", document=document_id, error=response.error)
            return ""
        return response.text
