"""A topic hierarchy of a documents dataset: its values, and strict parsing of the model's replies.

A hierarchy is a tuple of top-level ``Topic`` values, each with optional subtopics. Documents are
labelled with a *path*: ``"Cardiology"`` for a topic without subtopics, ``"Cardiology/Arrhythmia"``
for a subtopic (a topic with subtopics is not itself a label). The segments' ``topic`` column holds
these paths, so ``topic_where`` can turn a topic (a leaf or a parent) into an exact ``IN`` filter.

>>> hierarchy = parse_hierarchy('{"topics": [{"name": "Heart", "description": "d", "subtopics": []},'
...                             ' {"name": "Lungs", "description": "d", "subtopics": []}]}')
>>> hierarchy.labels
('Heart', 'Lungs')
>>> parse_label(" heart ", hierarchy)
'Heart'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from semray.catalog.segment_filter import in_list
from semray.errors import CatalogError, suggest
from semray.serving.prompts.topics import PROPOSE_OUTPUT

MAX_TOPICS = 30
MAX_SUBTOPICS = 12
MAX_NAME_CHARS = 80
SEPARATOR = "/"


class TopicReplyError(CatalogError):
    """The model's topic hierarchy or label does not parse or breaks the hierarchy's rules."""


@dataclass(frozen=True, slots=True)
class Topic:
    """One topic: a name unique among its siblings, a description, its subtopics (leaves)."""

    name: str
    description: str
    subtopics: tuple[Topic, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicHierarchy:
    """The top-level topics; ``labels`` are the paths a document can be given."""

    topics: tuple[Topic, ...]

    @property
    def labels(self) -> tuple[str, ...]:
        paths: list[str] = []
        for topic in self.topics:
            if topic.subtopics:
                paths.extend(f"{topic.name}{SEPARATOR}{sub.name}" for sub in topic.subtopics)
            else:
                paths.append(topic.name)
        return tuple(paths)

    def labels_under(self, topic: str) -> tuple[str, ...]:
        """The label paths a topic covers: itself when a leaf, its subtopics' paths when a parent."""
        labels = self.labels
        if topic in labels:
            return (topic,)
        under = tuple(label for label in labels if label.startswith(topic + SEPARATOR))
        if not under:
            names = [topic.name for topic in self.topics] + list(labels)
            hint = suggest(topic, names)
            advice = f"did you mean {hint!r}?" if hint else f"topics: {', '.join(names)}"
            raise CatalogError(f"no topic {topic!r} in this organization; {advice}")
        return under

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {
                "name": topic.name,
                "description": topic.description,
                "subtopics": [{"name": sub.name, "description": sub.description} for sub in topic.subtopics],
            }
            for topic in self.topics
        ]

    @classmethod
    def from_json(cls, document: Sequence[Mapping[str, Any]]) -> TopicHierarchy:
        return cls(
            tuple(
                Topic(
                    str(topic["name"]),
                    str(topic["description"]),
                    tuple(Topic(str(sub["name"]), str(sub["description"])) for sub in topic.get("subtopics", ())),
                )
                for topic in document
            )
        )


def parse_hierarchy(value: Any) -> TopicHierarchy:
    """The hierarchy in a proposal reply (JSON text, or the object a schema-constrained tier parsed).

    Strict: the reply must be exactly ``PROPOSE_OUTPUT`` (no extra keys), with 2 to ``MAX_TOPICS``
    topics, non-empty names without ``/`` that are unique among siblings (case-insensitively), and
    leaf paths that are unique.
    """
    document = value
    if isinstance(value, str):
        try:
            document = json.loads(value)
        except json.JSONDecodeError as error:
            raise TopicReplyError(
                f"the topic proposal is not JSON ({error.msg} at {error.pos}): {value[:80]!r}"
            ) from error
    try:
        jsonschema.validate(document, PROPOSE_OUTPUT)
    except jsonschema.ValidationError as error:
        where = "/".join(str(part) for part in error.absolute_path) or "the reply"
        raise TopicReplyError(f"the topic proposal does not match its schema at {where}: {error.message}") from error
    hierarchy = TopicHierarchy.from_json(document["topics"])
    if not 2 <= len(hierarchy.topics) <= MAX_TOPICS:
        raise TopicReplyError(f"the topic proposal has {len(hierarchy.topics)} topics; 2 to {MAX_TOPICS} are needed")
    _check_names([topic.name for topic in hierarchy.topics], "topics")
    for topic in hierarchy.topics:
        if len(topic.subtopics) > MAX_SUBTOPICS:
            raise TopicReplyError(f"topic {topic.name!r} has {len(topic.subtopics)} subtopics; at most {MAX_SUBTOPICS}")
        _check_names([sub.name for sub in topic.subtopics], f"subtopics of {topic.name!r}")
    return hierarchy


def parse_label(value: Any, hierarchy: TopicHierarchy) -> str:
    """The label path of a labelling reply: one of ``hierarchy.labels`` (surrounding space, quotes and
    case forgiven, nothing else)."""
    if not isinstance(value, str):
        raise TopicReplyError(f"a topic label is text, not {type(value).__name__}")
    text = value.strip().strip("\"'`").strip()
    by_folded = {label.casefold(): label for label in hierarchy.labels}
    label = by_folded.get(text.casefold())
    if label is None:
        raise TopicReplyError(f"{value[:80]!r} is not one of the topic paths ({len(hierarchy.labels)} listed)")
    return label


def topic_where(hierarchy: TopicHierarchy, topic: str) -> str:
    """A ``search_segments`` ``where`` keeping the segments labelled ``topic`` or any of its subtopics.

    >>> hierarchy = TopicHierarchy((Topic("Heart", "", (Topic("Valves", ""), Topic("Rhythm", ""))),))
    >>> topic_where(hierarchy, "Heart")
    '"topic" IN (\\'Heart/Valves\\', \\'Heart/Rhythm\\')'
    """
    return in_list("topic", list(hierarchy.labels_under(topic)))


def _check_names(names: Sequence[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if not name.strip() or name != name.strip():
            raise TopicReplyError(f"{what}: the name {name!r} is empty or has surrounding space")
        if SEPARATOR in name or "\x00" in name or len(name) > MAX_NAME_CHARS:
            raise TopicReplyError(f"{what}: the name {name!r} contains '/' or is longer than {MAX_NAME_CHARS}")
        if name.casefold() in seen:
            raise TopicReplyError(f"{what}: the name {name!r} repeats")
        seen.add(name.casefold())
