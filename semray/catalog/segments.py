"""Hierarchical segmentation of a document: document -> sections -> paragraphs -> chunks.

Sections come from the document's own headings (``headings.py``; nested by level, so a section
holds deeper sections); text before the first heading, or a whole document without headings,
gives paragraphs directly under the document. A section's first child is its heading line(s),
a paragraph of its own, then the paragraphs of its body (split at blank lines, never inside a
fenced code block), then its subsections. A paragraph longer than ``max_chunk_chars`` gets
chunks (``chunks.py``: sentence boundaries, never mid-word).

Spans: every segment's ``text`` is exactly ``document.text[start:end]``, and spans are trimmed
of surrounding whitespace (the root too). Children lie inside their parent, in order, without
overlap; ordinals count siblings from 0; ``path`` is the title followed by the headings of the
enclosing sections (paragraphs and chunks carry their section's path). So every non-whitespace
character of the document lies in exactly one leaf.

>>> from semray.sources.documents import DocumentText
>>> root = segment_document(DocumentText("# Plan\\n\\nShip it.", "markdown", "utf-8"), title="plan.md")
>>> [(s.level, s.path, s.text) for s in root.walk()]  # doctest: +NORMALIZE_WHITESPACE
[('document', ('plan.md',), '# Plan\\n\\nShip it.'), ('section', ('plan.md', 'Plan'), '# Plan\\n\\nShip it.'),
 ('paragraph', ('plan.md', 'Plan'), '# Plan'), ('paragraph', ('plan.md', 'Plan'), 'Ship it.')]
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from semray.catalog.chunks import chunk_spans
from semray.catalog.headings import Heading, find_headings
from semray.catalog.lines import Line, split_lines, trimmed
from semray.catalog.tables import SEGMENT_LEVELS
from semray.errors import SegmentError
from semray.sources.documents import DocumentText

_CHILD_LEVELS = {
    "document": frozenset({"section", "paragraph"}),
    "section": frozenset({"section", "paragraph"}),
    "paragraph": frozenset({"chunk"}),
    "chunk": frozenset(),
}


@dataclass(frozen=True, slots=True)
class Segment:
    """One node of a document's hierarchy, e.g. ``Segment("paragraph", ("a.md", "Plan"), 1, "Ship it.", 8, 16)``.

    Construction checks the invariants that hold without the document's text (a level of
    ``SEGMENT_LEVELS``, ``len(text) == end - start``, children inside the span, in order, with
    ordinals 0, 1, ...) and raises SegmentError otherwise.
    """

    level: str
    path: tuple[str, ...]
    ordinal: int
    text: str
    start: int
    end: int
    children: tuple[Segment, ...] = ()

    def __post_init__(self) -> None:
        if self.level not in SEGMENT_LEVELS:
            raise SegmentError(f"segment level {self.level!r} is not one of {', '.join(SEGMENT_LEVELS)}")
        if not 0 <= self.start <= self.end or len(self.text) != self.end - self.start:
            raise SegmentError(
                f"segment span [{self.start}, {self.end}) does not fit its text of {len(self.text)} characters"
            )
        previous_end = self.start
        for ordinal, child in enumerate(self.children):
            if child.level not in _CHILD_LEVELS[self.level]:
                raise SegmentError(f"a {self.level} cannot hold a {child.level}")
            if child.ordinal != ordinal:
                raise SegmentError(f"child {ordinal} of a {self.level} has ordinal {child.ordinal}")
            if child.start < previous_end or child.end > self.end:
                raise SegmentError(
                    f"child {ordinal} [{child.start}, {child.end}) of a {self.level} [{self.start}, {self.end}) "
                    "lies outside it or overlaps its previous sibling"
                )
            previous_end = child.end

    def walk(self) -> Iterator[Segment]:
        """This segment and every segment under it, parents before children, in text order."""
        yield self
        for child in self.children:
            yield from child.walk()

    def leaves(self) -> Iterator[Segment]:
        """The segments under this one (or itself) that have no children, in text order."""
        if not self.children:
            yield self
        for child in self.children:
            yield from child.leaves()


def segment_document(document: DocumentText, *, title: str, max_chunk_chars: int = 1000) -> Segment:
    """The hierarchy of ``document`` from its own headings; the root has level ``document``."""
    lines = split_lines(document.text)
    headings = find_headings(document.text, document.format, lines)
    return segment_sections(document, headings, title=title, max_chunk_chars=max_chunk_chars, lines=lines)


def segment_sections(
    document: DocumentText,
    headings: Sequence[Heading],
    *,
    title: str,
    max_chunk_chars: int = 1000,
    lines: Sequence[Line] | None = None,
) -> Segment:
    """The hierarchy of ``document`` with sections at the given ``headings`` (in text order).

    A heading with ``start == end`` (a boundary proposed by a model) opens a section without a
    heading line of its own.
    """
    if max_chunk_chars < 1:
        raise SegmentError(f"max_chunk_chars must be at least 1, got {max_chunk_chars}")
    text = document.text
    builder = _Builder(text, split_lines(text) if lines is None else lines, max_chunk_chars)
    start, end = trimmed(text, 0, len(text))
    path = (title,)
    children = builder.region(start, end, list(headings), path)
    return Segment("document", path, 0, text[start:end], start, end, _numbered(children))


def containing_segment(root: Segment, start: int, end: int) -> Segment:
    """The deepest segment under ``root`` whose span holds ``[start, end)`` (``root`` at least).

    Used to link a snippet to the segment it sits in.
    """
    for child in root.children:
        if child.start <= start and end <= child.end:
            return containing_segment(child, start, end)
    return root


class _Builder:
    def __init__(self, text: str, lines: Sequence[Line], max_chunk_chars: int) -> None:
        self.text = text
        self.lines = lines
        self.line_starts = [line.start for line in lines]
        self.max_chunk_chars = max_chunk_chars

    def region(self, start: int, end: int, headings: list[Heading], path: tuple[str, ...]) -> list[Segment]:
        """Paragraphs before the first heading, then one section per outermost heading."""
        out = self.paragraphs(start, headings[0].start if headings else end, path)
        index = 0
        while index < len(headings):
            heading = headings[index]
            inner = index + 1
            while inner < len(headings) and headings[inner].level > heading.level:
                inner += 1
            section_end = headings[inner].start if inner < len(headings) else end
            out.append(self.section(heading, headings[index + 1 : inner], section_end, path))
            index = inner
        return out

    def section(self, heading: Heading, inner: list[Heading], end: int, path: tuple[str, ...]) -> Segment:
        section_path = (*path, heading.title)
        children = self.paragraphs(heading.start, heading.end, section_path)
        children.extend(self.region(heading.end, end, inner, section_path))
        start, end = trimmed(self.text, heading.start, end)
        return Segment("section", section_path, 0, self.text[start:end], start, end, _numbered(children))

    def paragraphs(self, start: int, end: int, path: tuple[str, ...]) -> list[Segment]:
        """The blank-line separated paragraphs of ``text[start:end]``."""
        out: list[Segment] = []
        begin: int | None = None
        last = start
        number = max(0, bisect.bisect_right(self.line_starts, start) - 1)
        while number < len(self.lines) and self.lines[number].start < end:
            line = self.lines[number]
            number += 1
            line_start, line_end = max(line.start, start), min(line.end, end)
            blank = not self.text[line_start:line_end].strip()
            if blank and not line.fenced:
                if begin is not None:
                    out.append(self.paragraph(begin, last, path))
                begin = None
            elif not blank:
                begin = line_start if begin is None else begin
                last = line_end
        if begin is not None:
            out.append(self.paragraph(begin, last, path))
        return out

    def paragraph(self, start: int, end: int, path: tuple[str, ...]) -> Segment:
        start, end = trimmed(self.text, start, end)
        chunks: list[Segment] = []
        if end - start > self.max_chunk_chars:
            spans = chunk_spans(self.text, start, end, self.max_chunk_chars)
            if len(spans) > 1:
                chunks = [Segment("chunk", path, 0, self.text[s:e], s, e) for s, e in spans]
        return Segment("paragraph", path, 0, self.text[start:end], start, end, _numbered(chunks))


def _numbered(children: list[Segment]) -> tuple[Segment, ...]:
    return tuple(
        child if child.ordinal == index else replace(child, ordinal=index) for index, child in enumerate(children)
    )
