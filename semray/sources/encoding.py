"""Text encodings of CSV, JSON and text sources: the ``encoding`` and ``encoding_errors`` options.

By default a file must be valid UTF-8. One that is not fails the read with a SourceError
naming the byte offset and line of the first bad byte and suggesting the ``encoding``
option, so latin-1 or cp1252 text is never mangled silently. ``encoding`` takes any
Python codec name; ``encoding_errors="replace"`` reads undecodable bytes as U+FFFD
instead, counted and logged (``semray.sources.utf8``). A leading byte-order mark is
dropped.

>>> encoding_option({"encoding": "Latin-1"})
TextEncoding(name='iso8859-1', errors='strict')
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from pathlib import Path

from semray.errors import SourceError
from semray.sources.base import Options, option_str
from semray.sources.paths import open_raw

ENCODING_OPTIONS = frozenset({"encoding", "encoding_errors"})
"""The options every text-format reader (csv, json, text) accepts."""

_ERRORS = ("strict", "replace")
_CHUNK_BYTES = 8 << 20
BOM = "\ufeff"


@dataclass(frozen=True, slots=True)
class TextEncoding:
    """How a reader decodes bytes, e.g. ``TextEncoding("cp1252", "strict")``."""

    name: str = "utf-8"
    """A normalised Python codec name (``codecs.lookup(...).name``)."""
    errors: str = "strict"
    """``strict`` (fail on an undecodable byte) or ``replace`` (read it as U+FFFD)."""

    @property
    def is_utf8(self) -> bool:
        return self.name == "utf-8"

    @property
    def lenient_utf8(self) -> bool:
        """UTF-8 with bad bytes replaced: the readers' binary-column path, which counts rows hit."""
        return self.is_utf8 and self.errors == "replace"

    def decoder(self) -> codecs.IncrementalDecoder:
        return codecs.getincrementaldecoder(self.name)(self.errors)

    def decode(self, data: bytes, path: str) -> tuple[str, bool]:
        """All of ``data`` as text without a byte-order mark, and whether a bad byte was replaced.

        >>> TextEncoding("utf-8", "replace").decode(b"caf\\xe9", "f.txt")
        ('caf\ufffd', True)
        """
        try:
            text = data.decode(self.name, "strict")
            replaced = False
        except UnicodeDecodeError as error:
            if self.errors == "strict":
                line = _count_newlines(data[: error.start], self) + 1
                raise undecodable(path, error.start, data[error.start : error.end], line, self) from None
            text = data.decode(self.name, "replace")
            replaced = True
        return text.removeprefix(BOM), replaced


UTF8 = TextEncoding()
"""The default: strict UTF-8."""


def encoding_option(options: Options) -> TextEncoding:
    """The reader's encoding from its ``encoding`` and ``encoding_errors`` options, checked."""
    name = option_str(options, "encoding", "utf-8") or "utf-8"
    try:
        codec = codecs.lookup(name).name
    except LookupError:
        raise SourceError(
            f"unknown encoding {name!r}; give a Python codec name such as 'utf-8', 'latin-1', 'cp1252' or 'utf-16'"
        ) from None
    errors = option_str(options, "encoding_errors", "strict") or "strict"
    if errors not in _ERRORS:
        raise SourceError(f"option 'encoding_errors' must be 'strict' or 'replace', got {errors!r}")
    # The readers drop a leading byte-order mark themselves, so utf-8-sig is utf-8.
    return TextEncoding(name="utf-8" if codec == "utf-8-sig" else codec, errors=errors)


def undecodable(path: str, offset: int, bad: bytes, line: int | None, encoding: TextEncoding) -> SourceError:
    """The error for the first byte of ``path`` that ``encoding`` cannot decode."""
    where = f"byte offset {offset}" + (f" (line {line})" if line is not None else "")
    shown = f"byte 0x{bad[0]:02x}" if bad else "an incomplete character"
    return SourceError(
        f"{path!r} is not valid {encoding.name}: {shown} at {where} cannot be decoded; if the file uses another "
        "encoding, give it with the encoding option (e.g. encoding='latin-1' or 'cp1252'), or set "
        "encoding_errors='replace' to read undecodable bytes as U+FFFD"
    )


def find_undecodable(file: Path, encoding: TextEncoding) -> SourceError | None:
    """The error for the first undecodable byte of ``file``, or None when it all decodes.

    Reads the file again in chunks; used where the reader did not track byte offsets.
    """
    decoder = codecs.getincrementaldecoder(encoding.name)("strict")
    offset = 0
    lines = 0
    with open_raw(str(file)) as stream:
        while True:
            chunk = stream.read(_CHUNK_BYTES)
            held = len(decoder.getstate()[0])
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as error:
                data = error.object
                start = offset - held + error.start
                newlines = _count_newlines(data[min(held, error.start) : error.start], encoding)
                return undecodable(str(file), start, data[error.start : error.end], lines + newlines + 1, encoding)
            if not chunk:
                return None
            lines += _count_newlines(chunk, encoding)
            offset += len(chunk)


def _count_newlines(data: bytes, encoding: TextEncoding) -> int:
    if encoding.is_utf8:
        return data.count(b"\n")
    return data.decode(encoding.name, "replace").count("\n")
