"""The records of a JSON file (an array of objects, or one object per line) as UTF-8 lines.

Each record carries where it came from (its line, or its index in the array) so that
an error can point at it. Bytes the ``encoding`` cannot decode fail with their byte
offset unless ``encoding_errors="replace"``; a leading byte-order mark is dropped; an
object that repeats a key is refused (``json`` would keep only the last value).
"""

from __future__ import annotations

import codecs
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from semray.errors import SourceError
from semray.sources.encoding import BOM, TextEncoding, find_undecodable, undecodable
from semray.sources.paths import open_raw, read_bytes
from semray.sources.utf8 import decode_lenient, repair_surrogates

_LINE_SUFFIXES = (".jsonl", ".ndjson")
_UTF8_BOM = codecs.BOM_UTF8
_BLOCK_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class LineBatch:
    """Consecutive records of a file as UTF-8 JSON lines, e.g. ``LineBatch([b'{"a": 1}'], [3], 0)``."""

    lines: list[bytes]
    wheres: Sequence[int]
    """Each record's 1-based line in a line file, or its 0-based index in an array file."""
    replaced: int
    """Records in which bad bytes became U+FFFD (only with ``encoding_errors="replace"``)."""


class DuplicateKeyError(ValueError):
    """An object names one key twice."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def unique_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """``object_pairs_hook`` for ``json.loads`` that refuses a repeated key."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return result


def is_array_file(file: Path, encoding: TextEncoding) -> bool:
    """True when ``file`` holds one JSON array (its first non-blank character is ``[``)."""
    if file.name.lower().endswith(_LINE_SUFFIXES):
        return False
    decoder = codecs.getincrementaldecoder(encoding.name)("replace")
    with open_raw(str(file)) as stream:
        while chunk := stream.read(4096):
            stripped = decoder.decode(chunk).lstrip(BOM + " \t\r\n")
            if stripped:
                return stripped.startswith("[")
    return False


def describe(array: bool, where: int) -> str:
    """``"line 3"`` or ``"item 2"``."""
    return f"item {where}" if array else f"line {where}"


def iter_batches(file: Path, encoding: TextEncoding, rows: int) -> Iterator[LineBatch]:
    """The records of ``file`` in order, ``rows`` at a time (the last batch may be short)."""
    if is_array_file(file, encoding):
        yield from _batched(_array_records(file, encoding), rows)
    elif encoding.is_utf8:
        yield from _utf8_batches(file, encoding, rows)
    else:
        yield from _batched(_decoded_lines(file, encoding), rows)


def _utf8_batches(file: Path, encoding: TextEncoding, rows: int) -> Iterator[LineBatch]:
    """Line files read in large blocks: validated, split and filtered at C speed, not line by line."""
    lines: list[bytes] = []
    wheres: list[int] = []
    hits: list[int] = []
    emitted = 0
    for block_lines, block_wheres, block_hits in _utf8_blocks(file, encoding):
        hits.extend(emitted + len(lines) + hit for hit in block_hits)
        lines.extend(block_lines)
        wheres.extend(block_wheres)
        while len(lines) >= rows:
            yield LineBatch(lines[:rows], wheres[:rows], sum(emitted <= hit < emitted + rows for hit in hits))
            del lines[:rows], wheres[:rows]
            hits = [hit for hit in hits if hit >= emitted + rows]
            emitted += rows
    if lines:
        yield LineBatch(lines, wheres, len(hits))


def _utf8_blocks(file: Path, encoding: TextEncoding) -> Iterator[tuple[list[bytes], Sequence[int], list[int]]]:
    """Per block of whole lines: the non-blank lines, their line numbers, and the indexes of replaced ones."""
    offset = 0
    number = 1
    pending = b""
    with open_raw(str(file)) as stream:
        while True:
            block = stream.read(_BLOCK_BYTES)
            data = pending + block if pending else block
            cut = data.rfind(b"\n") + 1 if block else len(data)
            if block and cut == 0:
                pending = data
                continue
            part, pending = data[:cut], data[cut:]
            skipped = len(_UTF8_BOM) if offset == 0 and part.startswith(_UTF8_BOM) else 0
            if part:
                yield _split_block(part, skipped, offset, number, file, encoding)
            offset += len(part)
            number += part.count(b"\n")
            if not block:
                return


def _split_block(
    part: bytes, skipped: int, offset: int, number: int, file: Path, encoding: TextEncoding
) -> tuple[list[bytes], Sequence[int], list[int]]:
    valid = part.isascii()
    if not valid:
        try:
            part.decode("utf-8")
            valid = True
        except UnicodeDecodeError as error:
            if not encoding.lenient_utf8:
                where = number + part.count(b"\n", 0, error.start)
                bad = part[error.start : error.end]
                raise undecodable(str(file), offset + error.start, bad, where, encoding) from None
    lines = part[skipped:].split(b"\n")
    if part.endswith(b"\n"):
        lines.pop()
    if b"\r" in part:
        lines = [line.rstrip(b"\r") for line in lines]
    kept = [line for line in lines if line.strip()]
    wheres: Sequence[int] = range(number, number + len(lines))
    if len(kept) != len(lines):
        wheres = [where for where, line in zip(wheres, lines, strict=True) if line.strip()]
    hits: list[int] = []
    if not valid:
        for index, line in enumerate(kept):
            text, replaced = decode_lenient(line)
            if replaced:
                kept[index] = text.encode("utf-8")
                hits.append(index)
    return kept, wheres, hits


def _batched(records: Iterable[tuple[bytes, bool, int]], rows: int) -> Iterator[LineBatch]:
    lines: list[bytes] = []
    wheres: list[int] = []
    replaced = 0
    for line, hit, where in records:
        lines.append(line)
        wheres.append(where)
        replaced += hit
        if len(lines) == rows:
            yield LineBatch(lines, wheres, replaced)
            lines, wheres, replaced = [], [], 0
    if lines:
        yield LineBatch(lines, wheres, replaced)


def _decoded_lines(file: Path, encoding: TextEncoding) -> Iterator[tuple[bytes, bool, int]]:
    try:
        with io.TextIOWrapper(open_raw(str(file)), encoding=encoding.name, errors=encoding.errors, newline="") as text:
            for number, line in enumerate(text, start=1):
                stripped = line.rstrip("\r\n").removeprefix(BOM) if number == 1 else line.rstrip("\r\n")
                if stripped.strip():
                    replaced = encoding.errors == "replace" and "\ufffd" in stripped
                    yield stripped.encode("utf-8"), replaced, number
    except UnicodeDecodeError:
        raise find_undecodable(file, encoding) or SourceError(
            f"JSON {str(file)!r} is not valid {encoding.name}; check the encoding option"
        ) from None


def _array_records(file: Path, encoding: TextEncoding) -> Iterator[tuple[bytes, bool, int]]:
    data = read_bytes(file)
    if encoding.lenient_utf8:
        text = data.decode("utf-8", errors="surrogateescape").removeprefix(BOM)
    else:
        text, _ = encoding.decode(data, str(file))
    try:
        items = json.loads(text, object_pairs_hook=unique_pairs)
    except DuplicateKeyError as error:
        raise SourceError(
            f"an object in JSON {str(file)!r} has the key {error.key!r} twice, so one value would be lost; "
            "remove the duplicate key"
        ) from None
    except json.JSONDecodeError as error:
        raise SourceError(
            f"cannot parse JSON {str(file)!r}: {error.msg} at line {error.lineno}, column {error.colno}; "
            "fix the file or use one object per line"
        ) from error
    if not isinstance(items, list):
        raise SourceError(f"JSON {str(file)!r} must hold an array of objects or one object per line")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise SourceError(f"JSON {str(file)!r}: item {index} is not an object; every row must be an object")
        fixed, replaced = repair_surrogates(item) if encoding.lenient_utf8 else (item, False)
        yield json.dumps(fixed, ensure_ascii=False).encode("utf-8"), replaced, index
