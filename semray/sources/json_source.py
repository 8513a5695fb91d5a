"""JSON files: an array of objects, or one object per line (``.jsonl``/``.ndjson``).

One read task per file. Line files stream ``batch_rows`` lines at a time; array files
are parsed whole (the standard library has no streaming parser) and re-emitted as
lines, so both go through ``pyarrow.json`` with the same explicit schema. Bad UTF-8
becomes U+FFFD and is counted per row.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pjson

from semray.errors import SourceError
from semray.sources.base import (
    Options,
    ReadTask,
    check_batch_rows,
    check_no_rowid,
    check_options,
    option_int,
    option_str,
    project_schema,
    select_columns,
)
from semray.sources.inference import unify_schemas
from semray.sources.paths import FileSet, read_bytes, resolve_files
from semray.sources.rowids import file_prefix, numbered_ids, with_rowids
from semray.sources.utf8 import (
    counted_invalid_utf8,
    decode_lenient,
    file_is_valid_utf8,
    repair_surrogates,
)

OPTIONS = frozenset({"glob", "infer_rows", "infer_files"})
EXTENSIONS = (".json", ".jsonl", ".ndjson")
_LINE_SUFFIXES = (".jsonl", ".ndjson")


def is_array_file(file: Path) -> bool:
    """True when ``file`` holds one JSON array (its first non-blank byte is ``[``)."""
    if file.name.lower().endswith(_LINE_SUFFIXES):
        return False
    try:
        with file.open("rb") as stream:
            while chunk := stream.read(4096):
                stripped = chunk.lstrip()
                if stripped:
                    return stripped.startswith(b"[")
    except OSError as error:
        raise SourceError(f"cannot read JSON {str(file)!r}: {error.strerror or error}") from error
    return False


def iter_records(file: Path) -> Iterator[tuple[bytes, bool]]:
    """Each record of ``file`` as one UTF-8 JSON line, with a flag for replaced bad bytes."""
    if is_array_file(file):
        yield from _array_records(file)
        return
    try:
        with file.open("rb") as stream:
            for line in stream:
                raw = line.rstrip(b"\r\n")
                if not raw.strip():
                    continue
                text, replaced = decode_lenient(raw)
                yield (text.encode("utf-8") if replaced else raw), replaced
    except OSError as error:
        raise SourceError(f"cannot read JSON {str(file)!r}: {error.strerror or error}") from error


def _array_records(file: Path) -> Iterator[tuple[bytes, bool]]:
    try:
        items = json.loads(read_bytes(file).decode("utf-8", errors="surrogateescape"))
    except json.JSONDecodeError as error:
        raise SourceError(
            f"cannot parse JSON {str(file)!r}: {error}; fix the file or use one object per line"
        ) from error
    if not isinstance(items, list):
        raise SourceError(f"JSON {str(file)!r} must hold an array of objects or one object per line")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise SourceError(f"JSON {str(file)!r}: item {index} is not an object; every row must be an object")
        fixed, replaced = repair_surrogates(item)
        yield json.dumps(fixed, ensure_ascii=False).encode("utf-8"), replaced


def parse_lines(lines: list[bytes], schema: pa.Schema | None, path: str) -> pa.Table:
    """Parse JSON lines with pyarrow; ``schema`` (when given) fixes the types and drops other fields."""
    data = b"\n".join(lines) + b"\n"
    read = pjson.ReadOptions(block_size=max(len(data) + 1, 1 << 16))
    parse = pjson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore" if schema else "infer")
    try:
        return pjson.read_json(io.BytesIO(data), read_options=read, parse_options=parse)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise SourceError(
            f"cannot parse JSON {path!r}: {error}; types were inferred from the first rows, "
            "so raise the infer_rows option if a later value has another type"
        ) from error


@dataclass(frozen=True, slots=True)
class JsonFileRead:
    """Read one JSON file as ``_rowid`` + ``columns`` tables of ``batch_rows`` rows."""

    path: str
    prefix: str
    schema: pa.Schema
    columns: tuple[str, ...]
    batch_rows: int

    def __call__(self) -> Iterator[pa.Table]:
        return counted_invalid_utf8(self.path, self.decoded())

    def decoded(self) -> Iterator[tuple[pa.Table, int]]:
        # An empty explicit schema would read no rows; parse the first column and drop it.
        parsed = list(self.columns) or [self.schema.names[0]]
        schema = project_schema(self.schema, parsed)
        row = 0
        lines: list[bytes] = []
        hit = 0
        for line, replaced in iter_records(Path(self.path)):
            lines.append(line)
            hit += replaced
            if len(lines) == self.batch_rows:
                yield self._table(lines, schema, row), hit
                row += len(lines)
                lines, hit = [], 0
        if lines:
            yield self._table(lines, schema, row), hit

    def _table(self, lines: list[bytes], schema: pa.Schema, row: int) -> pa.Table:
        table = parse_lines(lines, schema, self.path)
        if not self.columns:
            table = table.drop_columns(schema.names)
        return with_rowids(table, numbered_ids(row, len(lines), self.prefix))


@dataclass(frozen=True)
class JsonSource:
    """A JSON source, e.g. ``JsonSource.open("reviews.jsonl", {})``."""

    files: FileSet
    arrow_schema: pa.Schema
    bytes_per_row: float
    kind: str = "json"

    @classmethod
    def open(cls, path: str | None, options: Options) -> JsonSource:
        check_options("json", options, OPTIONS)
        files = resolve_files(path, "json", EXTENSIONS, option_str(options, "glob"))
        infer_rows = option_int(options, "infer_rows", 1000)
        infer_files = option_int(options, "infer_files", 8)
        schemas: list[pa.Schema] = []
        sampled_bytes = 0
        sampled_rows = 0
        for file in files.files:
            if len(schemas) >= infer_files:
                break
            sample = _sample(file, infer_rows)
            if sample:
                schemas.append(parse_lines(sample, None, str(file)).schema)
                sampled_rows += len(sample)
                sampled_bytes += sum(len(line) + 1 for line in sample)
        if not schemas:
            what = f"JSON file {files.path!r} is" if not files.multi else f"every JSON file in {files.path!r} is"
            raise SourceError(f"{what} empty (no objects); give a source with at least one row")
        schema = unify_schemas(schemas)
        check_no_rowid(schema, f"JSON {files.path!r}")
        return cls(files=files, arrow_schema=schema, bytes_per_row=max(sampled_bytes / sampled_rows, 1.0))

    def schema(self) -> pa.Schema:
        return self.arrow_schema

    def estimated_rows(self) -> int | None:
        return sum(self._file_rows(file) for file in self.files.files)

    def read_tasks(self, columns: Sequence[str] | None, batch_rows: int) -> list[ReadTask]:
        check_batch_rows(batch_rows)
        names = tuple(select_columns(self.arrow_schema, columns, f"JSON {self.files.path!r}"))
        return [
            ReadTask(
                read=self._file_read(file, names, batch_rows),
                estimated_rows=self._file_rows(file),
                estimated_bytes=file.stat().st_size,
                input_files=(str(file),),
            )
            for file in self.files.files
        ]

    def invalid_utf8_count(self) -> int:
        return self._invalid_utf8

    @cached_property
    def _invalid_utf8(self) -> int:
        return sum(
            sum(replaced for _, replaced in iter_records(file))
            for file in self.files.files
            if not file_is_valid_utf8(file)
        )

    def _file_read(self, file: Path, names: tuple[str, ...], batch_rows: int) -> JsonFileRead:
        prefix = file_prefix(self.files.prefix(file))
        return JsonFileRead(
            path=str(file), prefix=prefix, schema=self.arrow_schema, columns=names, batch_rows=batch_rows
        )

    def _file_rows(self, file: Path) -> int:
        return round(file.stat().st_size / self.bytes_per_row)


def _sample(file: Path, rows: int) -> list[bytes]:
    sample = []
    for line, _ in iter_records(file):
        sample.append(line)
        if len(sample) >= rows:
            break
    return sample
