"""The documents a topic covers, read from an organised dataset's stored labels, to prune a semantic filter.

``organize_dataset`` labels every document of a documents dataset with a topic path (the segments'
``topic`` column). A semantic filter that asks whether a document is about one of those topics
(``"{text} is about Cardiology"``) need only see the documents labelled with it:
``TopicLabels(catalog_path)`` answers, for the catalog version a plan is pinned to, which topic an
instruction names (a topic or subtopic name, whole words, case-insensitive; None when it names
none or several) and the ids of the documents labelled under it. The rule
``semray.planner.rules.prune_by_topic`` puts them below the filter, which still decides each
remaining document: precision is the filter's, recall is bounded by the classifier's agreement
with the model (``Organization.agreement``). The optimizer applies it only when asked
(``Settings.topic_pruning``, ``Query.with_topic_pruning``, ``semray ask --topic-pruning``).

>>> labels = TopicLabels(settings.catalog_path)  # doctest: +SKIP
>>> labels(pin, "{text} is about cardiology")  # doctest: +SKIP
('notes/a.md', 'notes/c.md')
"""

from __future__ import annotations

import re
from pathlib import Path

from semray.catalog.catalogued_rows import pinned_segments
from semray.catalog.organize import organization
from semray.catalog.store import Catalog, read_manifest
from semray.catalog.topics import SEPARATOR, TopicHierarchy, topic_where
from semray.log import get_logger
from semray.operators.relational import CatalogPin
from semray.sql_quoting import quote_literal

log = get_logger(__name__)

MAX_PRUNED_DOCUMENTS = 5_000
"""The most document ids a pruning filter lists; a topic covering more is not worth an IN list."""


def instruction_topic(hierarchy: TopicHierarchy, instruction: str) -> str | None:
    """The one topic (a top-level name or a label path) an instruction names, or None.

    A subtopic named together with its parent counts as the subtopic (the narrower one).

    >>> from semray.catalog.topics import Topic
    >>> hierarchy = TopicHierarchy((Topic("Heart", "", (Topic("Valves", ""),)), Topic("Lungs", "")))
    >>> instruction_topic(hierarchy, "{text} is about heart valves"), instruction_topic(hierarchy, "{text} is long")
    ('Heart/Valves', None)
    """
    named: list[str] = []
    for topic in hierarchy.topics:
        if _mentions(instruction, topic.name):
            named.append(topic.name)
        named.extend(
            f"{topic.name}{SEPARATOR}{sub.name}" for sub in topic.subtopics if _mentions(instruction, sub.name)
        )
    narrowest = [path for path in named if not any(other.startswith(path + SEPARATOR) for other in named)]
    return narrowest[0] if len(narrowest) == 1 else None


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE) is not None


class TopicLabels:
    """Documents of a pinned, organised dataset labelled under the topic an instruction names."""

    def __init__(self, catalog_path: Path) -> None:
        self._catalog_path = catalog_path

    def __call__(self, pin: CatalogPin, instruction: str) -> tuple[str, ...] | None:
        """The labelled document ids, or None when the dataset is not organised at ``pin.version``, the
        instruction names no single topic, or the topic covers more than ``MAX_PRUNED_DOCUMENTS``."""
        segments = pinned_segments(self._catalog_path, pin)  # checks the version holds the planned content
        catalog = Catalog(self._catalog_path, read_manifest(self._catalog_path, pin.version), pinned=True)
        organized = organization(catalog, pin.dataset)
        if organized is None or organized.content_hash != pin.content_hash:
            return None
        topic = instruction_topic(organized.hierarchy, instruction)
        if topic is None:
            return None
        labelled = topic_where(organized.hierarchy, topic)
        where = f"dataset = {quote_literal(pin.dataset)} AND level = 'document' AND {labelled}"
        rows = segments.query(where, ["document_id"], limit=MAX_PRUNED_DOCUMENTS + 1)
        documents = tuple(sorted(set(rows.column("document_id").to_pylist())))
        if len(documents) > MAX_PRUNED_DOCUMENTS:
            return None
        log.info("topic_pruning", dataset=pin.dataset, version=pin.version, topic=topic, documents=len(documents))
        return documents
