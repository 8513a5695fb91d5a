"""Lenient UTF-8: bad bytes become U+FFFD instead of failing the read, and get counted.

Every reader that decodes text reports each affected file once, as the structlog
warning ``source_invalid_utf8`` with the file's ``path`` and the ``count`` of rows hit.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from semray.errors import SourceError
from semray.log import get_logger

log = get_logger(__name__)

_CHUNK_BYTES = 8 << 20


def file_is_valid_utf8(file: Path) -> bool:
    """True when every byte of ``file`` decodes as UTF-8 (read in chunks, C speed)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with file.open("rb") as stream:
            while chunk := stream.read(_CHUNK_BYTES):
                decoder.decode(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    except OSError as error:
        raise SourceError(f"cannot read {str(file)!r}: {error.strerror or error}") from error
    return True


def decode_lenient(data: bytes) -> tuple[str, bool]:
    """Decode ``data`` as UTF-8, replacing bad bytes; the flag says whether any were replaced.

    >>> decode_lenient(b"caf\\xe9")
    ('caf\ufffd', True)
    """
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), True


def binary_to_string(array: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray | None]:
    """Cast a binary column to string, replacing bad bytes.

    Returns the string array and, when some value had bad bytes, a boolean mask of those rows.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    try:
        return pc.cast(array, pa.string()), None
    except pa.ArrowInvalid:
        pass
    values: list[str | None] = []
    hit = np.zeros(len(array), dtype=bool)
    for index, value in enumerate(array.to_pylist()):
        if value is None:
            values.append(None)
            continue
        text, replaced = decode_lenient(value)
        hit[index] = replaced
        values.append(text)
    return pa.array(values, type=pa.string()), hit


def binary_columns_to_string(table: pa.Table, names: frozenset[str]) -> tuple[pa.Table, int]:
    """Decode the ``names`` columns of ``table`` leniently; returns the table and the rows hit."""
    if not names:
        return table, 0
    bad_rows: np.ndarray | None = None
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        if field.name not in names:
            columns.append(column)
            continue
        decoded, hit = binary_to_string(column)
        columns.append(decoded)
        if hit is not None:
            bad_rows = hit if bad_rows is None else bad_rows | hit
    schema = pa.schema([pa.field(f.name, pa.string()) if f.name in names else f for f in table.schema])
    rows = 0 if bad_rows is None else int(bad_rows.sum())
    return pa.Table.from_arrays(columns, schema=schema), rows


def repair_surrogates(value: object) -> tuple[object, bool]:
    """Replace lone surrogates (from ``errors="surrogateescape"``) in nested JSON values with U+FFFD."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", errors="replace"), True
        return value, False
    if isinstance(value, list):
        changed = False
        items = []
        for item in value:
            fixed, hit = repair_surrogates(item)
            items.append(fixed)
            changed = changed or hit
        return items, changed
    if isinstance(value, dict):
        changed = False
        fields = {}
        for key, item in value.items():
            fixed_key, key_hit = repair_surrogates(key)
            fixed, hit = repair_surrogates(item)
            fields[fixed_key] = fixed
            changed = changed or hit or key_hit
        return fields, changed
    return value, False


def report_invalid_utf8(path: str, count: int) -> None:
    """Log one warning for a file whose bytes were not valid UTF-8 (no-op when count is 0)."""
    if count:
        log.warning("source_invalid_utf8", path=path, count=count)


def counted_invalid_utf8(path: str, decoded: Iterator[tuple[pa.Table, int]]) -> Iterator[pa.Table]:
    """Yield the tables of ``decoded`` and report the rows with bad UTF-8 once, at the end."""
    bad = 0
    try:
        for table, hit in decoded:
            bad += hit
            yield table
    finally:
        report_invalid_utf8(path, bad)
