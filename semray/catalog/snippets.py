"""Tabular snippets inside documents: pipe tables and enumerated values, as columns and rows.

Kinds (``tables.SNIPPETS_SCHEMA``): ``markdown_table`` (a GitHub-style pipe table: a header
row, a delimiter row of ``---`` cells with as many cells, then body rows up to a blank line or
a line without ``|``; rows are padded or cut to the header's width, ``\\|`` is a literal pipe,
an empty header cell is named ``column_<n>``), ``html_table`` (the same, in an HTML document,
whose extraction renders tables as pipe tables) and ``enumeration`` (``enumerations.py``;
columns ``key`` and ``value``). Nothing inside a fenced code block counts. ``text[start:end]``
is exactly the snippet's lines, trimmed of surrounding whitespace; snippets are in text order
and do not overlap.

>>> from semray.sources.documents import DocumentText
>>> snippet, = find_snippets(DocumentText("| a | b |\\n|---|--:|\\n| 1 | 2 |", "markdown", "utf-8"))
>>> snippet.kind, snippet.columns, snippet.rows, (snippet.start, snippet.end)
('markdown_table', ('a', 'b'), (('1', '2'),), (0, 29))
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from semray.catalog.enumerations import find_enumerations
from semray.catalog.lines import Line, split_lines
from semray.errors import SegmentError
from semray.sources.documents import DocumentText

_DELIMITER_CELL = re.compile(r":?-+:?")
ENUMERATION_COLUMNS = ("key", "value")


@dataclass(frozen=True, slots=True)
class Snippet:
    """A table found in a document, e.g. ``Snippet("enumeration", ("key", "value"), (("To", "Bob"),), 0, 7)``.

    Every row has one cell per column (checked at construction: SegmentError otherwise).
    """

    kind: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise SegmentError(f"snippet span [{self.start}, {self.end}) is not a span")
        for number, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise SegmentError(f"snippet row {number} has {len(row)} cells for {len(self.columns)} columns")


def find_snippets(document: DocumentText) -> list[Snippet]:
    """The tables and enumerations of ``document``, in text order."""
    text = document.text
    lines = split_lines(text)
    kind = "html_table" if document.format == "html" else "markdown_table"
    snippets: list[Snippet] = []
    taken: set[int] = set()
    number = 0
    while number < len(lines) - 1:
        found = _table_at(text, lines, number, kind)
        if found is None:
            number += 1
            continue
        snippet, after = found
        snippets.append(snippet)
        taken.update(range(number, after))
        number = after
    for run in find_enumerations(text, lines, taken):
        rows = tuple((key, value) for key, value in run.rows)
        snippets.append(Snippet("enumeration", ENUMERATION_COLUMNS, rows, run.start, run.end))
    return sorted(snippets, key=lambda snippet: snippet.start)


def split_cells(row: str) -> list[str]:
    """The cells of a pipe-table row, outer pipes dropped, ``\\|`` read as ``|``.

    >>> split_cells("| a \\\\| b | c |")
    ['a | b', 'c']
    """
    cells: list[str] = []
    current: list[str] = []
    stripped = row.strip()
    index = 0
    while index < len(stripped):
        char = stripped[index]
        if char == "\\" and stripped[index + 1 : index + 2] == "|":
            current.append("|")
            index += 2
            continue
        if char == "|":
            cells.append("".join(current))
            current = []
        else:
            current.append(char)
        index += 1
    cells.append("".join(current))
    if stripped.startswith("|"):
        cells = cells[1:]
    if stripped.endswith("|") and not stripped.endswith("\\|") and cells:
        cells = cells[:-1]
    return [cell.strip() for cell in cells]


def _table_at(text: str, lines: Sequence[Line], number: int, kind: str) -> tuple[Snippet, int] | None:
    """The table whose header is line ``number`` and the number of the line after it, or None."""
    header_line, delimiter_line = lines[number], lines[number + 1]
    header = text[header_line.start : header_line.end]
    delimiter = text[delimiter_line.start : delimiter_line.end]
    if header_line.fenced or delimiter_line.fenced or "|" not in header or "|" not in delimiter:
        return None
    columns = split_cells(header)
    delimiters = split_cells(delimiter)
    if len(columns) != len(delimiters) or not all(_DELIMITER_CELL.fullmatch(cell) for cell in delimiters):
        return None
    rows: list[tuple[str, ...]] = []
    after = number + 2
    while after < len(lines):
        line = lines[after]
        content = text[line.start : line.end]
        if line.fenced or "|" not in content or not content.strip():
            break
        cells = split_cells(content)[: len(columns)]
        rows.append(tuple(cells + [""] * (len(columns) - len(cells))))
        after += 1
    names = tuple(name or f"column_{index}" for index, name in enumerate(columns, 1))
    start = header_line.start + len(header) - len(header.lstrip())
    last = lines[after - 1]
    end = last.start + len(text[last.start : last.end].rstrip())
    return Snippet(kind, names, tuple(rows), start, end), after
