"""The prompt asking a model for the sections of a document without headings, as versioned data.

The reply is a JSON object validated against ``SECTIONS_SCHEMA``: the sections in order, each
with a short title and the first words of the section copied from the document, which the
catalog looks up in the text (``catalog/section_proposals.py`` rejects words that do not occur,
or occur out of order or overlapping).

>>> "Title: memo.txt" in sections_prompt("memo.txt", "Dear all, ...")
True
"""

from __future__ import annotations

from typing import Any

from semray.serving.contract import OutputConstraint
from semray.serving.prompts.formats import format_instruction

SECTIONS_PROMPT_VERSION = "section-prompts/1"

SECTIONS_TEMPLATE = (
    "Divide the document below into its sections, in the order they appear. A section is a run of "
    "paragraphs about one subject; most documents have between two and ten. For each section give a "
    "short title and the first words of the section (five to ten words), copied exactly from the "
    "document, so that they can be found in it.\n\n"
    "Title: {title}\n\nDocument:\n{text}\n\n{instruction}"
)

SECTIONS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sections": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "minLength": 1, "maxLength": 200},
                    "first_words": {"type": "string", "minLength": 1, "maxLength": 400},
                },
                "required": ["title", "first_words"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["sections"],
    "additionalProperties": False,
}

SECTIONS_CONSTRAINT = OutputConstraint.schema(SECTIONS_SCHEMA)


def sections_prompt(title: str, text: str) -> str:
    """The whole prompt for the document ``title`` whose text (maybe a prefix) is ``text``."""
    instruction = format_instruction(SECTIONS_CONSTRAINT, native_json=False) or ""
    return SECTIONS_TEMPLATE.format(title=title, text=text, instruction=instruction)
