"""HTML to text that keeps the page's structure, with the standard library's ``html.parser``.

The text reads as Markdown, so segmentation and snippet finding treat HTML and Markdown alike:
``h1``-``h6`` become ``#`` heading lines; paragraphs and other blocks are separated by blank
lines; list items are ``- `` (or ``1. ``) lines, indented two spaces per nesting level, one list
per paragraph; tables become pipe tables (first row as header, ``|`` in cells escaped); ``dt``/
``dd`` pairs become ``term: definition`` lines; ``pre`` becomes a fenced code block; ``br`` is a
line break. Whitespace is collapsed outside ``pre``; entities are decoded; ``script``,
``style``, ``noscript``, ``template`` and ``svg`` are dropped; ``title`` is returned apart.

>>> html_to_text("<h1>Q3</h1><p>Sales &amp; costs.</p><ul><li>up</li><li>down</li></ul>")
('# Q3\\n\\nSales & costs.\\n\\n- up\\n- down', None)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

_SKIPPED = frozenset({"script", "style", "noscript", "template", "svg"})
_BLOCKS = frozenset(
    {
        "p", "div", "section", "article", "header", "footer", "main", "nav", "aside", "blockquote",
        "figure", "figcaption", "address", "form", "fieldset", "details", "summary", "body", "dl", "hr",
        "center", "legend",
    }
)  # fmt: skip
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_BREAK = "\ue000"
"""Stands for a ``br`` inside collapsed text (a private-use character, removed from page text)."""


@dataclass(slots=True)
class _Table:
    rows: list[list[str]] = field(default_factory=list)
    row: list[str] | None = None
    cell: list[str] | None = None
    caption: list[str] | None = None
    depth: int = 1
    """Tables nested inside this one: their cells' text joins the enclosing cell."""


class _Renderer(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[str, str]] = []
        """(kind, text): "item:<list>" blocks join the previous item of the same list with one newline."""
        self.list_number = 0
        """Counts outermost lists (and ``dl``s), so two lists in a row stay two paragraphs."""
        self.inline: list[str] = []
        self.prefix = ""
        self.kind = "text"
        self.skipping = 0
        self.pre = 0
        self.lists: list[list[int]] = []
        """One [ordered, next number] per open list."""
        self.table: _Table | None = None
        self.term: str | None = None
        self.in_title = False
        self.title: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self.skipping += 1
        elif self.skipping:
            return
        elif tag == "title":
            self.in_title = True
        elif self.table is not None:
            self._table_start(self.table, tag)
        elif tag == "br":
            self.inline.append(_BREAK)
        elif tag in _HEADINGS:
            self._start_block("#" * _HEADINGS[tag] + " ", "heading")
        elif tag in ("ul", "ol"):
            self._flush()
            self.list_number += not self.lists
            self.lists.append([int(tag == "ol"), 1])
        elif tag == "li":
            self._start_item()
        elif tag == "table":
            self._flush()
            self.table = _Table()
        elif tag == "pre":
            self._flush()
            self.pre += 1
        elif tag in ("dt", "dd"):
            self._term_start(tag)
        elif tag == "dl":
            self._flush()
            self.list_number += 1
        elif tag in _BLOCKS:
            self._start_block("", "text")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self.skipping = max(0, self.skipping - 1)
        elif self.skipping:
            return
        elif tag == "title":
            self.in_title = False
        elif self.table is not None:
            self._table_end(self.table, tag)
        elif tag in ("ul", "ol"):
            self._flush()
            if self.lists:
                self.lists.pop()
        elif tag == "pre":
            self._flush_pre()
        elif tag == "dt":
            self.term = self._collapse("".join(self.inline))
            self.inline = []
        elif tag == "dd" or tag in _HEADINGS or tag == "li" or tag in _BLOCKS:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self.skipping:
            return
        data = data.replace(_BREAK, " ")
        if self.in_title:
            self.title.append(data)
        elif self.table is not None:
            target = self.table.cell if self.table.cell is not None else self.table.caption
            if target is not None:
                target.append(data)
        else:
            self.inline.append(data)

    def text(self) -> str:
        self._flush()
        pieces: list[str] = []
        previous = ""
        for kind, block in self.blocks:
            if pieces:
                pieces.append("\n" if kind == previous and kind.startswith("item") else "\n\n")
            pieces.append(block)
            previous = kind
        return "".join(pieces)

    def _start_block(self, prefix: str, kind: str) -> None:
        if self._collapse("".join(self.inline)):
            self._flush()
        else:
            self.inline = []
        # A block opened inside a list item (<li><p>...) keeps the item's marker.
        if not (kind == "text" and self.kind.startswith("item") and self.prefix):
            self.prefix, self.kind = prefix, kind

    def _start_item(self) -> None:
        self._flush()
        if not self.lists:
            self.list_number += 1
            self.lists.append([0, 1])
        ordered, number = self.lists[-1]
        self.lists[-1][1] = number + 1
        indent = "  " * (len(self.lists) - 1)
        self.prefix, self.kind = indent + (f"{number}. " if ordered else "- "), f"item:{self.list_number}"

    def _term_start(self, tag: str) -> None:
        if tag == "dt":
            self._flush()
            self.term = None
        else:
            self.inline = []
            self.prefix, self.kind = (f"{self.term}: " if self.term else ""), f"item:{self.list_number}"
            self.term = None

    def _flush(self) -> None:
        text = self._collapse("".join(self.inline))
        if text:
            self.blocks.append((self.kind, self.prefix + text))
        self.inline, self.prefix, self.kind = [], "", "text"

    def _flush_pre(self) -> None:
        self.pre = max(0, self.pre - 1)
        if self.pre:
            return
        body = "".join(self.inline).replace(_BREAK, "\n").strip("\n")
        if body.strip():
            self.blocks.append(("pre", f"```\n{body}\n```"))
        self.inline, self.prefix, self.kind = [], "", "text"

    def _collapse(self, text: str) -> str:
        if self.pre:
            return text
        return "\n".join(" ".join(part.split()) for part in text.split(_BREAK)).strip("\n")

    def _table_start(self, table: _Table, tag: str) -> None:
        if tag == "table":
            table.depth += 1
        elif table.depth > 1:
            if tag in ("td", "th", "br") and table.cell is not None:
                table.cell.append(" ")
        elif tag == "tr":
            _close_row(table)
            table.row = []
        elif tag in ("td", "th"):
            _close_cell(table)
            if table.row is None:
                table.row = []
            table.cell = []
        elif tag == "caption":
            table.caption = []
        elif tag == "br" and table.cell is not None:
            table.cell.append(" ")

    def _table_end(self, table: _Table, tag: str) -> None:
        if tag == "table":
            table.depth -= 1
            if table.depth == 0:
                self.table = None
                self._render_table(table)
        elif table.depth > 1:
            return
        elif tag in ("td", "th"):
            _close_cell(table)
        elif tag == "tr":
            _close_row(table)

    def _render_table(self, table: _Table) -> None:
        _close_row(table)
        caption = " ".join("".join(table.caption or ()).split())
        if caption:
            self.blocks.append(("text", caption))
        rows = [row for row in table.rows if any(row)]
        if not rows:
            return
        width = max(len(row) for row in rows)
        padded = [row + [""] * (width - len(row)) for row in rows]
        lines = [_table_line(padded[0]), _table_line(["---"] * width)]
        lines.extend(_table_line(row) for row in padded[1:])
        self.blocks.append(("table", "\n".join(lines)))


def _close_cell(table: _Table) -> None:
    if table.cell is not None and table.row is not None:
        table.row.append(" ".join("".join(table.cell).split()).replace("|", "\\|"))
    table.cell = None


def _close_row(table: _Table) -> None:
    _close_cell(table)
    if table.row is not None:
        table.rows.append(table.row)
    table.row = None


def _table_line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def html_to_text(html: str) -> tuple[str, str | None]:
    """The page's text (Markdown-like, see the module docstring) and its ``<title>``, if any."""
    renderer = _Renderer()
    renderer.feed(html)
    renderer.close()
    title = " ".join("".join(renderer.title).split())
    return renderer.text(), title or None
