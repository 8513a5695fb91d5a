"""A file's bytes as UTF-8 for pyarrow's CSV reader, checked on the way through.

``CheckedInput`` decodes as it streams: a byte the source's encoding cannot decode
raises a SourceError with its byte offset and line (pyarrow passes the exception
through unchanged), a non-UTF-8 file is transcoded, and the quote characters are
counted so that a quote left open at the end of the file can be found afterwards.
It reads ``.gz`` files through ``gzip``, since pyarrow only decompresses paths.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from semray.sources.encoding import TextEncoding, undecodable
from semray.sources.paths import open_raw
from semray.sources.utf8 import log

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_READ_BYTES = 1 << 20


class CheckedInput(io.RawIOBase):
    """Read ``path`` as UTF-8, e.g. ``pcsv.open_csv(CheckedInput("a.csv", TextEncoding()))``."""

    def __init__(self, path: str, encoding: TextEncoding, quote: bytes = b"", report: bool = False) -> None:
        super().__init__()
        self.path = path
        self.encoding = encoding
        self.quote = quote
        self.quotes = 0
        """Quote bytes passed on so far."""
        self.at_end = False
        """True once the whole file has been read."""
        self._raw = open_raw(path)
        # Lenient UTF-8 passes bytes through: the binary-column path replaces and counts them.
        self._decoder = None if encoding.lenient_utf8 else encoding.decoder()
        self._offset = 0
        self._lines = 0
        self._pending = b""
        self._start = 0
        self._replaced = False
        self._report = report

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def read(self, size: int | None = -1) -> bytes:
        wanted = _READ_BYTES if size is None or size < 0 else size
        if wanted == 0:
            return b""
        if self.encoding.is_utf8:
            # UTF-8 passes through unchanged, so no bytes are held back between reads.
            return b"" if self.at_end else self._next_chunk(wanted)
        while self._start >= len(self._pending) and not self.at_end:
            self._pending, self._start = self._next_chunk(max(wanted, _READ_BYTES)), 0
        data = self._pending[self._start : self._start + wanted]
        self._start += len(data)
        return data

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
            if self._replaced and self._report:
                log.warning("source_undecodable_bytes", path=self.path, encoding=self.encoding.name)
        super().close()

    def _next_chunk(self, size: int) -> bytes:
        raw = self._raw.read(size)
        if not raw:
            self.at_end = True
        out = self._decode(raw)
        if self.quote:
            self.quotes += out.count(self.quote)
        self._offset += len(raw)
        return out

    def _decode(self, raw: bytes) -> bytes:
        if self._decoder is None:
            return raw
        held = len(self._decoder.getstate()[0])
        try:
            text = self._decoder.decode(raw, final=not raw)
        except UnicodeDecodeError as error:
            data = error.object
            prefix = data[min(held, error.start) : error.start]
            newlines = (
                prefix.count(b"\n")
                if self.encoding.is_utf8
                else prefix.decode(self.encoding.name, "replace").count("\n")
            )
            offset = self._offset - held + error.start
            bad = data[error.start : error.end]
            raise undecodable(self.path, offset, bad, self._lines + newlines + 1, self.encoding) from None
        if self.encoding.is_utf8:
            self._lines += raw.count(b"\n")
            return raw
        self._lines += text.count("\n")
        if self.encoding.errors == "replace" and "\ufffd" in text:
            self._replaced = True
        return text.encode("utf-8")
