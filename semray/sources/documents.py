"""Documents (text, Markdown, HTML, PDF) as one text each, for segmentation and snippets.

``read_document`` picks the format by suffix (case-insensitive), reads only regular files (the
checks of ``paths.py``: no pipes, devices, link loops or dead links) and refuses a file over
``max_bytes`` (64 MiB by default) before reading it: segmentation needs a document's whole text
at once, so a huge file is not streamed but refused with a message that names the limit and the
keyword that raises it.

- text and Markdown: decoded strictly, the encoding detected (``document_encoding.py``: BOMs,
  UTF-16, UTF-8, then cp1252/latin-1 only when the bytes look like single-byte text, logged).
- HTML: decoded the same way (a ``<meta charset>`` is honoured), then rendered to Markdown-like
  text that keeps headings, paragraphs, lists and tables (``html_text.py``).
- PDF: the pages' text joined by blank lines (``pdf_text.py``); ``page_starts`` holds the
  offset where each page's text begins. A damaged or password-protected PDF is a SourceError.

Every failure is a SourceError that names the file and the reason.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> _ = (folder / "note.md").write_text("# Plan\\n\\nShip it.", encoding="utf-8")
>>> read_document(folder / "note.md")
DocumentText(text='# Plan\\n\\nShip it.', format='markdown', encoding='utf-8', title=None, page_starts=())
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from semray.errors import SourceError
from semray.sources.document_encoding import decode_document, decode_html
from semray.sources.html_text import html_to_text
from semray.sources.paths import check_regular, file_status, read_bytes
from semray.sources.pdf_text import read_pdf

DocumentFormat = Literal["text", "markdown", "html", "pdf"]

_FORMATS: dict[str, DocumentFormat] = {
    ".txt": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
}
DOCUMENT_SUFFIXES = frozenset(_FORMATS)
"""The suffixes ``read_document`` reads (compared in lower case)."""

DEFAULT_MAX_BYTES = 64 << 20
"""Files larger than this are refused unless ``read_document(..., max_bytes=...)`` allows them."""

PAGE_SEPARATOR = "\n\n"
"""Between the pages of a PDF's text."""


@dataclass(frozen=True, slots=True)
class DocumentText:
    """A document's text, e.g. ``DocumentText("# Plan\\n\\nShip it.", "markdown", "utf-8")``.

    Segment and snippet spans are character offsets into ``text``.
    """

    text: str
    format: DocumentFormat
    encoding: str | None
    """The codec that decoded the file; None for a PDF (its text is not a byte encoding)."""
    title: str | None = None
    """The HTML ``<title>`` or the PDF's metadata title, when the file has one."""
    page_starts: tuple[int, ...] = ()
    """PDF only: the offset in ``text`` where each page's text begins."""


def document_format(path: Path) -> DocumentFormat:
    """The format ``read_document`` reads ``path`` as, by suffix; SourceError for another suffix.

    >>> document_format(Path("Report.PDF"))
    'pdf'
    """
    found = _FORMATS.get(path.suffix.lower())
    if found is None:
        supported = ", ".join(sorted(DOCUMENT_SUFFIXES))
        raise SourceError(f"{str(path)!r} is not a document semray reads (suffixes: {supported})")
    return found


def read_document(path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, encoding: str | None = None) -> DocumentText:
    """The text of the document at ``path``.

    ``encoding`` (a Python codec name) overrides detection for text, Markdown and HTML.
    """
    kind = document_format(path)
    size = _regular_file_size(path)
    if size > max_bytes:
        raise SourceError(
            f"{str(path)!r} is {_mib(size)}, over the {_mib(max_bytes)} limit for one document (its whole text "
            f"is segmented at once); pass read_document(..., max_bytes={size}) or more to read it"
        )
    data = read_bytes(path)
    name = str(path)
    if kind == "pdf":
        pages, title = read_pdf(data, name)
        starts: list[int] = []
        offset = 0
        for page in pages:
            starts.append(offset)
            offset += len(page) + len(PAGE_SEPARATOR)
        return DocumentText(PAGE_SEPARATOR.join(pages), "pdf", None, title=title, page_starts=tuple(starts))
    if kind == "html":
        markup, codec = decode_html(data, name, encoding)
        text, title = html_to_text(markup)
        return DocumentText(text, "html", codec, title=title)
    text, codec = decode_document(data, name, encoding)
    return DocumentText(text, kind, codec)


def _regular_file_size(path: Path) -> int:
    """The size of ``path``, checked to be a regular file with the messages of ``paths.py``, from one ``stat``
    (an ingest reads thousands of small documents: the checks cost more than the reading)."""
    status = file_status(path, "document")
    if stat.S_ISDIR(status.st_mode):
        raise SourceError(f"{str(path)!r} is a folder, not a document; give one file")
    check_regular(path, status.st_mode)
    return status.st_size


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
