"""The text of a PDF, page by page, with ``pypdf``.

Each page's text is what ``pypdf`` extracts, lines kept; a blank line is added after a line that
ends a sentence and is clearly shorter than the page's usual line (the last line of a
paragraph), since PDF text has no blank lines of its own and segmentation splits paragraphs at
blank lines. A file that ``pypdf`` cannot parse, or an encrypted one that the empty password does
not open, is a SourceError naming the file.

>>> paragraph_breaks("The first line of the paragraph\\nends here.\\nThe next paragraph starts here")
'The first line of the paragraph\\nends here.\\n\\nThe next paragraph starts here'
"""

from __future__ import annotations

import io
import statistics
import zlib

from pypdf import PasswordType, PdfReader
from pypdf.errors import PyPdfError

from semray.errors import SourceError
from semray.log import get_logger

log = get_logger(__name__)

_SHORT_LINE = 0.7
"""A line under this share of the page's median line length may end a paragraph."""
_SENTENCE_END = (".", "!", "?", ":", '."', ".'", ".)")
# pypdf raises its own errors for most damage, but a damaged object graph can surface as any of
# these from inside its parser.
_PARSE_ERRORS = (PyPdfError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError, zlib.error)


def read_pdf(data: bytes, path: str) -> tuple[list[str], str | None]:
    """The text of every page of the PDF in ``data`` and its metadata title (None when absent)."""
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        _decrypt(reader, path)
        pages = [paragraph_breaks(page.extract_text() or "") for page in reader.pages]
        title = _title(reader)
    except SourceError:
        raise
    except _PARSE_ERRORS as error:
        raise SourceError(
            f"{path!r} is not a readable PDF ({type(error).__name__}: {error}); the file may be damaged or "
            "not a PDF at all; re-export it or leave it out"
        ) from error
    return pages, title


def paragraph_breaks(page: str) -> str:
    """``page`` with a blank line after each line that looks like the end of a paragraph."""
    lines = page.split("\n")
    lengths = [len(line.strip()) for line in lines if line.strip()]
    if len(lengths) < 2:
        return page
    usual = statistics.median(lengths)
    out: list[str] = []
    for index, line in enumerate(lines):
        out.append(line)
        stripped = line.strip()
        following = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if stripped and following and stripped.endswith(_SENTENCE_END) and len(stripped) < _SHORT_LINE * usual:
            out.append("")
    return "\n".join(out)


def _decrypt(reader: PdfReader, path: str) -> None:
    if not reader.is_encrypted:
        return
    # Many PDFs are encrypted only against editing, with an empty user password.
    if reader.decrypt("") == PasswordType.NOT_DECRYPTED:
        raise SourceError(
            f"{path!r} is an encrypted PDF that needs a password; decrypt it first (e.g. "
            "`qpdf --decrypt --password=... in.pdf out.pdf`) or leave it out"
        )
    log.info("pdf_decrypted_with_empty_password", path=path)


def _title(reader: PdfReader) -> str | None:
    metadata = reader.metadata
    title = metadata.title if metadata is not None else None
    if not title:
        return None
    return " ".join(str(title).split()) or None
