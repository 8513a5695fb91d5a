"""Open a tabular file for the catalog, inferring what its format leaves unclear.

- Encoding: a CSV or JSON file that is not UTF-8 is opened with the encoding
  ``charset_normalizer`` detects in its first megabyte (recorded in the ``files`` table); one
  with no plausible encoding is refused as undecodable.
- A CSV whose first line is data (a name is a number) or no usable header (an empty or
  repeated name) is read without a header: the reader names the columns ``f0, f1, ...``.
- A JSON file whose records have varying keys is read with the union of their keys (missing
  keys are null), inferred over as many records as it takes (``infer_rows``).

The schema status says which of these applied; a model tier, when one is configured, may propose
names and types for such a schema (``semray.catalog.summaries``), checked against the data.

>>> looks_like_data(["1", "2.5", "-3"])
True
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from semray.catalog.profiling import TableProfile, profile_source
from semray.errors import SourceError
from semray.sources import Source, open_source
from semray.sources.base import OptionValue

SNIFF_BYTES = 1 << 20
SAMPLE_LINES = 20
KEY_SAMPLE_RECORDS = 1000
_INFER_ROWS = re.compile(r"set the infer_rows option to at least (\d+)")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
DECLARED = "declared"


@dataclass(frozen=True, slots=True)
class OpenedTable:
    """An opened source with the reader options that open it again, and how its schema was found."""

    source: Source
    options: dict[str, OptionValue] = field(default_factory=dict)
    schema_status: str = DECLARED
    sample_lines: tuple[str, ...] = ()
    encoding: str | None = None

    @property
    def inferred(self) -> bool:
        return self.schema_status != DECLARED


def open_tabular(kind: str, path: Path, options: dict[str, OptionValue]) -> OpenedTable:
    """Open ``path`` as a ``kind`` source (csv, json, parquet), inferring encoding, header and keys."""
    options = dict(options)
    encoding = None
    if kind in ("csv", "json"):
        encoding = detect_encoding(path)
        if encoding != "utf-8":
            options["encoding"] = encoding
    if kind == "csv":
        return _open_csv(path, options, encoding)
    if kind == "json":
        return _open_json(path, options, encoding)
    return OpenedTable(open_source(kind, str(path), options), options)


def detect_encoding(path: Path) -> str:
    """``utf-8`` when the file's first megabyte decodes as UTF-8, else the detected encoding.

    Raises SourceError when no encoding fits (binary data under a text extension).
    """
    with path.open("rb") as handle:
        head = handle.read(SNIFF_BYTES)
    try:
        codecs.getincrementaldecoder("utf-8")("strict").decode(head, final=len(head) < SNIFF_BYTES)
        if b"\x00" not in head:
            return "utf-8"
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(head).best()
    if best is None or (b"\x00" in head and best.encoding.replace("_", "-") not in ("utf-16", "utf-32")):
        raise SourceError(
            f"{str(path)!r} is not text in any encoding semray can detect (binary data?); "
            "fix or remove the file, or give its encoding with the `encoding` option"
        )
    return codecs.lookup(best.encoding).name


def looks_like_data(names: list[str]) -> bool:
    """A header line with a number among its names is a data row (a column is hardly ever named 2.5)."""
    return any(_NUMBER.match(name.strip()) for name in names)


def _open_csv(path: Path, options: dict[str, OptionValue], encoding: str | None) -> OpenedTable:
    from semray.sources.csv_source import CsvFormat, header_names
    from semray.sources.encoding import TextEncoding

    delimiter = str(options.get("delimiter", ","))
    reason = None
    try:
        names = header_names(str(path), CsvFormat(delimiter=delimiter, encoding=TextEncoding(encoding or "utf-8")))
        if looks_like_data(names):
            reason = "the first line holds data (a name is a number)"
        else:
            return OpenedTable(open_source("csv", str(path), options), options, encoding=encoding)
    except SourceError as error:
        if "header" not in str(error):
            raise
        reason = f"its header is unusable ({error})"
    options = {**options, "header": False}
    status = f"inferred: no header row, {reason}; the reader names the columns f0, f1, ..."
    return OpenedTable(open_source("csv", str(path), options), options, status, _first_lines(path), encoding)


def _open_json(path: Path, options: dict[str, OptionValue], encoding: str | None) -> OpenedTable:
    key_sets = _key_sets(path, encoding or "utf-8")
    status = DECLARED
    if len(key_sets) > 1:
        status = (
            f"inferred: keys vary between records ({len(key_sets)} different key sets in the first "
            f"{KEY_SAMPLE_RECORDS}); the schema is the union of the keys, a missing key reads as null"
        )
    lines = _first_lines(path) if status != DECLARED else ()
    return OpenedTable(open_source("json", str(path), options), options, status, lines, encoding)


def open_and_profile(kind: str, path: Path, options: dict[str, OptionValue]) -> tuple[OpenedTable, TableProfile]:
    """``open_tabular`` then ``profile_source``, reading the file once; a JSON key first seen after the
    reader's inference sample widens the sample (``infer_rows``) and profiles again."""
    opened = open_tabular(kind, path, options)
    for _attempt in range(4):
        try:
            return opened, profile_source(opened.source)
        except SourceError as error:
            wanted = _INFER_ROWS.search(str(error)) if kind == "json" else None
            if wanted is None:
                raise
            rows = max(int(wanted.group(1)), 4 * int(opened.options.get("infer_rows") or 1000))
            widened = {**opened.options, "infer_rows": rows}
            status = (
                f"inferred: keys vary between records (one first appears in record {wanted.group(1)}); the schema "
                f"is the union of the keys of the first {rows} records, a missing key reads as null"
            )
            opened = OpenedTable(
                open_source("json", str(path), widened), widened, status, _first_lines(path), opened.encoding
            )
    raise SourceError(
        f"the keys of {str(path)!r} keep changing deep into the file; set the infer_rows option to its record count"
    )


def _key_sets(path: Path, encoding: str) -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()
    with path.open("r", encoding=encoding, errors="replace") as handle:
        for number, line in enumerate(handle):
            if number >= KEY_SAMPLE_RECORDS:
                break
            try:
                record: Any = json.loads(line)
            except ValueError:
                return found  # a JSON array or pretty-printed file: the reader's own inference decides
            if isinstance(record, dict):
                found.add(tuple(sorted(record)))
    return found


def _first_lines(path: Path) -> tuple[str, ...]:
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        return tuple(line.rstrip("\n")[:500] for _, line in zip(range(SAMPLE_LINES), handle, strict=False))
