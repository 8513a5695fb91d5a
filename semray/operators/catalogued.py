"""Plans over catalogued documents: which rows are a pinned documents dataset's, and what a segment hit adds.

A Scan that ``read_catalog`` (or a planning agent) pinned to a documents dataset
(``SourceSpec.catalog.documents``) reads one row per document: ``document_id`` and ``text``, whose
segments, vectors and full-text index the catalog already holds. ``documents_below`` finds such a
Scan under operators that only drop rows and projections, and says which output column is which
documents column; ``catalogued_documents`` applies it to a SemSearch (the column searched must be
the documents' ``text`` and some column must keep ``document_id``). The cost model prices that shape
as one query embedding, lowering routes it to the catalog's indexes, and a SemSearch with a segment
``level`` requires it, so the three cannot disagree.

``SEGMENT_LEVELS`` is the catalog's hierarchy (``catalog/tables.py`` reads it from here), and
``SEGMENT_HIT_COLUMNS`` the columns a SemSearch at a level adds for each segment it returns.

>>> SEGMENT_LEVELS
('document', 'section', 'paragraph', 'chunk')
>>> [name for name, _ in SEGMENT_HIT_COLUMNS]
['segment_id', 'segment_path', 'segment_start', 'segment_end', 'segment_text']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from sqlglot import exp

from semray.operators.expressions import parse_expression
from semray.operators.relational import DOCUMENT_KEY, DOCUMENT_TEXT, CatalogPin, Limit, Project, Scan
from semray.operators.schema import ROW_ID

if TYPE_CHECKING:
    from semray.operators.base import Node
    from semray.operators.semantic import SemSearch

SegmentLevel = Literal["document", "section", "paragraph", "chunk"]
SEGMENT_LEVELS: tuple[SegmentLevel, ...] = ("document", "section", "paragraph", "chunk")
"""Levels of the segment hierarchy, outermost first; a segment's parent is one level up."""

SEGMENT_HIT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("segment_id", "VARCHAR"),  # the catalog's stable id of the segment (snippets link to it)
    ("segment_path", "VARCHAR[]"),  # the document's title, then the headings of its enclosing sections
    ("segment_start", "BIGINT"),  # its character span in the document's text: text[start:end]
    ("segment_end", "BIGINT"),
    ("segment_text", "VARCHAR"),
)
"""What a SemSearch at a segment level adds to the row of each hit's document, after its score."""


def catalogued_documents(node: SemSearch) -> tuple[CatalogPin, str] | None:
    """The pin of the catalogued documents ``node`` searches and the input column naming each row's document.

    None when the search must embed its input (any input that is not such documents, a computed
    ``text``, or no column keeping ``document_id``).
    """
    found = documents_below(node.input)
    if found is None:
        return None
    pin, names = found
    if names.get(node.column) != DOCUMENT_TEXT:
        return None
    keys = document_keys(names)
    return (pin, keys[0]) if keys else None


def document_keys(names: dict[str, str]) -> list[str]:
    """The output columns that are the documents' ``document_id``, given ``documents_below``'s mapping."""
    return [name for name, source in names.items() if source == DOCUMENT_KEY]


def documents_below(node: Node) -> tuple[CatalogPin, dict[str, str]] | None:
    """The pinned documents dataset whose rows ``node`` outputs, with each output column's documents column.

    ``node`` must reach a Scan pinned to a documents dataset through operators that only drop rows and
    projections; a column computed on the way is left out of the mapping. None for any other plan.
    """
    names = {name: name for name in node.output_schema.names if name != ROW_ID}
    current: Node = node
    while not isinstance(current, Scan):
        if isinstance(current, Project):
            below = {item.name: _bare_column(item.expr) for item in current.exprs}
            names = {name: source for name, at in names.items() if (source := below.get(at)) is not None}
        elif not (current.drops_rows_only() or isinstance(current, Limit)):
            # A LIMIT keeps some rows unchanged too: the search ranks the documents it kept (their ids
            # restrict the catalog's indexes), so ``SemSearch`` over ``read_catalog(...).limit(n)`` embeds
            # the query, not n rows.
            return None
        current = current.children[0]
    pin = current.source.catalog
    return (pin, names) if pin is not None and pin.documents else None


def _bare_column(expression: str) -> str | None:
    """The column an expression is, unchanged (``text``, ``"text"``), or None for any computation."""
    tree = parse_expression(expression, "Project")
    return tree.name if isinstance(tree, exp.Column) and not tree.table else None
