"""The encoding of a document's bytes, detected, and the text decoded strictly.

Detection, in order: a byte-order mark (UTF-8, UTF-16, UTF-32); UTF-16 without a mark, told by
its pattern of NUL bytes; strict UTF-8; a charset the document declares (an HTML ``<meta>``);
and only then a single-byte fallback (cp1252, or latin-1 when no byte falls in 0x80-0x9f),
taken when the bytes look like single-byte text: no NUL or other control bytes, few bytes
above 0x7f, every byte defined in cp1252. The fallback is logged (``document_encoding_guessed``).
Anything else fails with the SourceError of ``encoding.undecodable`` (byte offset and line of
the first bad byte), so nothing is ever replaced silently. An explicit ``encoding`` skips
detection and decodes strictly.

>>> decode_document("caf\\u00e9".encode("utf-16"), "a.txt")
('café', 'utf-16-le')
>>> decode_document(b"plain ascii", "a.txt")
('plain ascii', 'utf-8')
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable

from semray.errors import SourceError
from semray.log import get_logger
from semray.sources.encoding import BOM, TextEncoding, encoding_option, undecodable

log = get_logger(__name__)

_BOMS = (
    # UTF-32-LE's mark starts with UTF-16-LE's, so it is tried first.
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_CONTROL = bytes(byte for byte in range(0x20) if byte not in b"\t\n\r\f")
_HIGH = bytes(range(0x80, 0x100))
_C1 = bytes(range(0x80, 0xA0))
_HIGH_SHARE = 0.3
"""At most this share of bytes above 0x7f for the single-byte fallback (text, not binary)."""
_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def decode_document(data: bytes, path: str, encoding: str | None = None) -> tuple[str, str]:
    """The text of ``data`` and the codec that decoded it; SourceError when nothing decodes it.

    ``encoding`` (a Python codec name) skips detection; HTML goes through ``decode_html``.
    """
    if encoding is not None:
        chosen = encoding_option({"encoding": encoding})
        text, _ = chosen.decode(data, path)
        return text, chosen.name
    for mark, name in _BOMS:
        if data.startswith(mark):
            return _strict(data[len(mark) :], path, name), name
    utf16 = _utf16_without_bom(data)
    if utf16 is not None:
        return _strict(data, path, utf16), utf16
    return _utf8_or_fallback(data, path, declared=None)


def decode_html(data: bytes, path: str, encoding: str | None = None) -> tuple[str, str]:
    """Like ``decode_document``, but a charset the page declares is tried before the fallback.

    >>> decode_html(b'<meta charset="windows-1252"><p>\\x93hi\\x94</p>', "a.html")
    ('<meta charset="windows-1252"><p>“hi”</p>', 'cp1252')
    """
    if encoding is not None or data.startswith(tuple(mark for mark, _ in _BOMS)) or _utf16_without_bom(data):
        return decode_document(data, path, encoding)
    return _utf8_or_fallback(data, path, declared=declared_charset(data))


def declared_charset(data: bytes) -> str | None:
    """The codec named by a ``<meta charset>`` in the first 4 KiB, or None (also for an unknown name)."""
    match = _META_CHARSET.search(data[:4096])
    if match is None:
        return None
    try:
        return codecs.lookup(match.group(1).decode("ascii")).name
    except LookupError:
        return None


def _utf8_or_fallback(data: bytes, path: str, declared: str | None) -> tuple[str, str]:
    try:
        return data.decode("utf-8").removeprefix(BOM), "utf-8"
    except UnicodeDecodeError as error:
        first_error = error
    if declared is not None and declared != "utf-8":
        return _strict(data, path, declared), declared
    fallback = _single_byte_codec(data)
    if fallback is None:
        line = data[: first_error.start].count(b"\n") + 1
        bad = data[first_error.start : first_error.end]
        raise undecodable(path, first_error.start, bad, line, TextEncoding())
    log.warning("document_encoding_guessed", path=path, encoding=fallback, reason="not valid UTF-8")
    return data.decode(fallback), fallback


def _single_byte_codec(data: bytes) -> str | None:
    """cp1252 or latin-1 when ``data`` looks like single-byte text, else None."""
    if len(data.translate(None, _CONTROL)) != len(data):
        return None
    high = len(data) - len(data.translate(None, _HIGH))
    if high > _HIGH_SHARE * len(data):
        return None
    try:
        data.decode("cp1252")
    except UnicodeDecodeError:
        return None
    uses_c1 = len(data.translate(None, _C1)) != len(data)
    return "cp1252" if uses_c1 else "iso8859-1"


def _utf16_without_bom(data: bytes) -> str | None:
    """``utf-16-le`` / ``utf-16-be`` when NULs fill one byte of most pairs (ASCII-range UTF-16), else None."""
    sample = data[:4096]
    pairs = len(sample) // 2
    if pairs < 2 or len(data) % 2:
        return None
    even = sample[0 : pairs * 2 : 2].count(0)
    odd = sample[1 : pairs * 2 : 2].count(0)
    if odd >= 0.4 * pairs and even <= 0.05 * pairs:
        return "utf-16-le"
    if even >= 0.4 * pairs and odd <= 0.05 * pairs:
        return "utf-16-be"
    return None


def _strict(data: bytes, path: str, name: str) -> str:
    try:
        return data.decode(name)
    except UnicodeDecodeError as error:
        line = data[: error.start].decode(name, "replace").count("\n") + 1
        raise undecodable(path, error.start, data[error.start : error.end], line, TextEncoding(name)) from None
    except LookupError:
        raise SourceError(f"{path!r} declares the unknown encoding {name!r}; give one with encoding=...") from None


def marked_codec(head: bytes, size: int) -> tuple[str, int] | None:
    """For a document read in parts: the codec its first bytes tell (a byte-order mark, or UTF-16
    without one) and the mark's length in bytes; None when only all of its bytes can tell (strict
    UTF-8, else ``single_byte_codec_of``). ``head``: the first 4 KiB; ``size``: the file's bytes.

    >>> marked_codec(codecs.BOM_UTF8 + b"hi", 5), marked_codec(b"plain", 5)
    (('utf-8', 3), None)
    """
    for mark, name in _BOMS:
        if head.startswith(mark):
            return name, len(mark)
    utf16 = _utf16_without_bom(head[: len(head) - len(head) % 2]) if size % 2 == 0 else None
    return (utf16, 0) if utf16 is not None else None


def single_byte_codec_of(chunks: Iterable[bytes]) -> str | None:
    """``_single_byte_codec`` over a document's bytes given in chunks (a file too large to hold).

    >>> single_byte_codec_of([b"caf\\xe9 ", b"ol\\xe9"]), single_byte_codec_of([b"\\x00\\x01"])
    ('iso8859-1', None)
    """
    total = high = 0
    uses_c1 = False
    for chunk in chunks:
        if len(chunk.translate(None, _CONTROL)) != len(chunk):
            return None
        try:
            chunk.decode("cp1252")
        except UnicodeDecodeError:
            return None
        total += len(chunk)
        high += len(chunk) - len(chunk.translate(None, _HIGH))
        uses_c1 = uses_c1 or len(chunk.translate(None, _C1)) != len(chunk)
    if high > _HIGH_SHARE * total:
        return None
    return "cp1252" if uses_c1 else "iso8859-1"
