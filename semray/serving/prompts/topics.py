"""Prompts of the catalog's semantic organization: propose a topic hierarchy, label one document.

Versioned (``TOPICS_PROMPT_VERSION``); the proposal's output schema sits next to its template and
the reply is parsed strictly by ``semray.catalog.topics.parse_hierarchy`` (a label is a choice
among the hierarchy's topic paths, ``parse_label``). Document excerpts are substituted as text and
never re-parsed.
"""

from __future__ import annotations

from typing import Any

TOPICS_PROMPT_VERSION = "topic-prompts/1"

PROPOSE_SYSTEM = "You organise document collections into topics for analysts. Answer with JSON only."
PROPOSE_TEMPLATE = (
    "These are excerpts of {shown} documents sampled from the collection {name!r} ({documents} documents):\n\n"
    "{excerpts}\n\n"
    "Propose a topic hierarchy that would let an analyst find documents by subject: between 2 and "
    "{max_topics} top-level topics, each with up to {max_subtopics} subtopics (or none). Every document "
    "of the collection should fit exactly one topic path. Names are short noun phrases without '/'; "
    "descriptions are one sentence."
)
PROPOSE_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "topics": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "subtopics": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"name": {"type": "string"}, "description": {"type": "string"}},
                            "required": ["name", "description"],
                            "additionalProperties": False,
                        },
                    },
                },
                "required": ["name", "description", "subtopics"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["topics"],
    "additionalProperties": False,
}
PROPOSE_MAX_TOKENS = 1500
PROPOSE_EXCERPT_CHARS = 500

LABEL_SYSTEM = "You assign documents to topics. Answer with one topic path exactly as listed."
LABEL_TEMPLATE = (
    "Topics of the collection {name!r} (a path is 'topic' or 'topic/subtopic'):\n{topics}\n\n"
    "Document:\n{text}\n\n"
    "Which topic path fits this document best? Answer with the path only."
)
LABEL_MAX_TOKENS = 40
LABEL_EXCERPT_CHARS = 1500
