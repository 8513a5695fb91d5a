"""Documents too large to read whole, read in parts: a text or Markdown file over the stream threshold.

``read_document`` holds a file's bytes and its text at once, so the ingest streams a text or
Markdown file over ``Settings.catalog_stream_bytes`` (64 MiB by default) instead, in two passes
over the file, each holding about one part:

1. ``check_streamed`` finds the encoding (a byte-order mark or UTF-16 from the first bytes; else
   strict UTF-8; else the single-byte fallback of ``document_encoding``, over all the bytes) and
   decodes the whole file strictly, counting its characters. An undecodable file is refused here,
   before anything of it is segmented, with the SourceError ``read_document`` would raise.
2. ``text_parts`` decodes it again and cuts the text into parts of about ``part_chars``
   characters: before the last Markdown heading in the part's second half, else after its last
   blank line there, else after its last line end, else (one line longer than a part) at
   ``part_chars``. The catalog segments each part on its own (``document_pipeline.DocumentReader``)
   and shifts its spans by the part's offset, so every segment but the document's root keeps
   ``text == document text[start:end]``.

What a part boundary costs: a section that continues past it goes on, in the next part, as
paragraphs under the document (a cut falls before a heading when the part's second half has one);
a fenced code block cut in two is read as text after the cut. HTML and PDF files are rendered
whole, so over the threshold they are skipped with that reason.

>>> import tempfile
>>> path = Path(tempfile.mkdtemp()) / "big.md"
>>> _ = path.write_text("# A\\n\\none two\\n\\n# B\\n\\nthree", encoding="utf-8")
>>> streamed = check_streamed(path)
>>> streamed.codec, streamed.chars
('utf-8', 24)
>>> [(offset, text) for offset, text in text_parts(path, streamed, part_chars=16)]
[(0, '# A\\n\\none two\\n\\n'), (14, '# B\\n\\nthree')]
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from semray.errors import SourceError
from semray.log import get_logger
from semray.sources.document_encoding import marked_codec, single_byte_codec_of
from semray.sources.encoding import TextEncoding, find_undecodable
from semray.sources.paths import open_raw

log = get_logger(__name__)

READ_BYTES = 1 << 20
"""Bytes read from the file at a time (both passes)."""
PART_CHARS = 65_536
"""Characters of one part: its segments (a few hundred) travel as one row to the embedder."""
STREAMED_SUFFIXES = frozenset({".txt", ".md", ".markdown"})
"""The suffixes read in parts; other documents over the threshold are skipped."""
_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class StreamedText:
    """What the check pass found, e.g. ``StreamedText("utf-8", 0, 70_000_000)``."""

    codec: str
    skip: int
    """Bytes of a byte-order mark at the file's start (not text)."""
    chars: int
    """Characters of the whole decoded text."""


def check_streamed(path: Path) -> StreamedText:
    """The encoding and character count of ``path``, decoding all of it strictly; SourceError otherwise."""
    with open_raw(str(path)) as stream:
        head = stream.read(4096)
    marked = marked_codec(head, path.stat().st_size)
    if marked is not None:
        codec, skip = marked
        return StreamedText(codec, skip, _count_chars(path, codec, skip))
    try:
        return StreamedText("utf-8", 0, _count_chars(path, "utf-8", 0))
    except SourceError as utf8_error:
        fallback = single_byte_codec_of(_chunks(path, 0))
        if fallback is None:
            raise utf8_error from None
    log.warning("document_encoding_guessed", path=str(path), encoding=fallback, reason="not valid UTF-8")
    return StreamedText(fallback, 0, path.stat().st_size)  # one character per byte


def text_parts(path: Path, streamed: StreamedText, *, part_chars: int = PART_CHARS) -> Iterator[tuple[int, str]]:
    """(character offset, text) of each part of ``path``'s text, in order; together they are the whole text."""
    decoder = codecs.getincrementaldecoder(streamed.codec)("strict")
    pending = ""
    offset = 0
    for chunk in _chunks(path, streamed.skip):
        pending += decoder.decode(chunk)
        while len(pending) > part_chars:
            cut = part_end(pending, part_chars)
            yield offset, pending[:cut]
            offset += cut
            pending = pending[cut:]
    pending += decoder.decode(b"", final=True)
    if pending:
        yield offset, pending
    if offset + len(pending) != streamed.chars:
        raise SourceError(
            f"{str(path)!r} changed while it was read ({streamed.chars} characters, then {offset + len(pending)}); "
            "refresh the catalog again"
        )


def part_end(text: str, part_chars: int) -> int:
    """Where the part starting ``text`` ends (module doc: a heading, a blank line, a line end, else ``part_chars``).

    >>> part_end("aaaa\\n\\nbbbb\\ncc", 12), part_end("a b c d e f", 6)
    (11, 6)
    """
    window = text[:part_chars]
    half = part_chars // 2
    headings = [match.start() for match in _HEADING.finditer(window, half) if match.start() > 0]
    if headings:
        return headings[-1]
    for separator in ("\n\n", "\n"):
        found = window.rfind(separator, half)
        if found >= 0:
            return found + len(separator)
    return part_chars


def _count_chars(path: Path, codec: str, skip: int) -> int:
    decoder = codecs.getincrementaldecoder(codec)("strict")
    chars = 0
    try:
        for chunk in _chunks(path, skip):
            chars += len(decoder.decode(chunk))
        chars += len(decoder.decode(b"", final=True))
    except UnicodeDecodeError:
        error = find_undecodable(path, TextEncoding(codec))
        raise error if error is not None else SourceError(f"{str(path)!r} is not valid {codec}") from None
    return chars


def _chunks(path: Path, skip: int) -> Iterator[bytes]:
    with open_raw(str(path)) as stream:
        stream.seek(skip)
        while chunk := stream.read(READ_BYTES):
            yield chunk
