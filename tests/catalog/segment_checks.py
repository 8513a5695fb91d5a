"""The invariants every segmentation must keep, checked over a whole tree (shared by the catalog tests)."""

from __future__ import annotations

from semray.catalog.segments import Segment
from semray.catalog.tables import SEGMENT_LEVELS
from semray.sources.documents import DocumentText


def check_segmentation(document: DocumentText, root: Segment, title: str) -> None:
    """Spans match texts, are trimmed and nest; ordinals count; paths extend; leaves tile the text."""
    text = document.text
    assert root.level == "document" and root.path == (title,) and root.ordinal == 0
    for segment in root.walk():
        assert segment.level in SEGMENT_LEVELS
        assert 0 <= segment.start <= segment.end <= len(text)
        assert segment.text == text[segment.start : segment.end]
        assert segment.text == segment.text.strip()
        assert segment.text or segment is root
        assert [child.ordinal for child in segment.children] == list(range(len(segment.children)))
        previous = segment.start
        for child in segment.children:
            assert segment.start <= child.start and child.end <= segment.end
            assert child.start >= previous
            previous = child.end
            assert child.path[: len(segment.path)] == segment.path
            depth = 1 if child.level == "section" else 0
            assert len(child.path) == len(segment.path) + depth
    covered = [0] * len(text)
    for leaf in root.leaves():
        for index in range(leaf.start, leaf.end):
            covered[index] += 1
    for index, char in enumerate(text):
        if not char.isspace():
            assert covered[index] == 1, f"character {index} ({char!r}) lies in {covered[index]} leaves"
