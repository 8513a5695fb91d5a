"""Find a CSV quote that is opened and never closed (it would swallow every later row).

pyarrow reads such a value to the end of the file without complaint. The reader
counts quote bytes as it streams (``CheckedInput.quotes``); only when that count is odd
does it call ``find_unterminated_quote``, which follows pyarrow's quoting rules: a quote
opens a value only at the start of a field, a doubled quote inside a value is a literal
quote, and any other quote closes the value. (A file with one literal quote in the
middle of an unquoted field *and* one unterminated value has an even count and is not
caught; pyarrow then reads the rest of the file into that value.)
"""

from __future__ import annotations

from dataclasses import dataclass

from semray.errors import SourceError
from semray.sources.checked_input import CheckedInput
from semray.sources.encoding import TextEncoding

_CHUNK_BYTES = 1 << 20
_UTF8_BOM = b"\xef\xbb\xbf"


@dataclass(slots=True)
class _QuoteState:
    """Where a scan stands: inside a quoted value or not, and where that value opened."""

    inside: bool = False
    pending_quote: bool = False
    """Inside a value, the previous chunk ended on a quote: the next byte says close or literal."""
    opened_line: int = 0
    lines: int = 0
    previous: bytes = b"\n"


def find_unterminated_quote(path: str, delimiter: str, quote: str, encoding: TextEncoding) -> int | None:
    """The 1-based line where a never-closed quoted value starts, or None.

    >>> import tempfile, pathlib
    >>> file = pathlib.Path(tempfile.mkdtemp()) / "q.csv"
    >>> _ = file.write_bytes(b'a,b\\n1,"ok"\\n2,"open\\n3,z\\n')
    >>> find_unterminated_quote(str(file), ",", '"', TextEncoding())
    3
    """
    state = _QuoteState()
    marks = (delimiter.encode("utf-8"), b"\n", b"\r")
    mark = quote.encode("utf-8")
    first = True
    with CheckedInput(path, encoding) as stream:
        while chunk := stream.read(_CHUNK_BYTES):
            if first and chunk.startswith(_UTF8_BOM):
                chunk = chunk[len(_UTF8_BOM) :]
            first = False
            _scan(chunk, mark, marks, state)
    return state.opened_line if state.inside and not state.pending_quote else None


def unterminated_quote_error(path: str, line: int, quote: str) -> SourceError:
    return SourceError(
        f"cannot read CSV {path!r}: the quoted value that starts on line {line} is never closed, so it would "
        f"swallow every row after it; close the quote ({quote!r}) in the file, double a quote that is part of "
        "the value, or set the quote_char option to a character the file does not use for quoting"
    )


def _scan(chunk: bytes, quote: bytes, marks: tuple[bytes, ...], state: _QuoteState) -> None:
    index = 0
    if state.pending_quote:
        state.pending_quote = False
        if chunk[:1] == quote:
            index = 1
        else:
            state.inside = False
    while (found := chunk.find(quote, index)) >= 0:
        if state.inside:
            if found + 1 == len(chunk):
                state.pending_quote = True
                index = found + 1
                break
            if chunk[found + 1 : found + 2] == quote:
                index = found + 2
                continue
            state.inside = False
        else:
            before = chunk[found - 1 : found] if found else state.previous
            if before in marks:
                state.inside = True
                state.opened_line = state.lines + chunk.count(b"\n", 0, found) + 1
        index = found + 1
    state.lines += chunk.count(b"\n")
    if chunk:
        state.previous = chunk[-1:]
