"""JSON files: an array of objects, or one object per line (``.jsonl``/``.ndjson``).

One read task per file. Line files stream ``batch_rows`` lines at a time; array files
are parsed whole (the standard library has no streaming parser) and re-emitted as
lines, so both go through ``pyarrow.json`` with the same explicit schema. Every line
is parsed against the whole schema, so a key that inference never saw, or a value of
another type, fails the read with a SourceError naming the line and the option that
widens inference (``infer_rows``, ``infer_files``) instead of being dropped. Bytes
follow the ``encoding`` options (``semray.sources.encoding``).
"""

from __future__ import annotations

import io
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
    check_column_names,
    check_options,
    option_int,
    option_str,
    select_columns,
)
from semray.sources.encoding import ENCODING_OPTIONS, TextEncoding, encoding_option
from semray.sources.inference import InferenceWindow, unify_schemas
from semray.sources.json_diagnosis import JsonContext, explain_json_error
from semray.sources.json_records import LineBatch, is_array_file, iter_batches
from semray.sources.paths import FileSet, resolve_files
from semray.sources.rowids import file_prefix, numbered_ids, with_rowids
from semray.sources.utf8 import counted_invalid_utf8, file_is_valid_utf8

OPTIONS = frozenset({"glob", "infer_rows", "infer_files"}) | ENCODING_OPTIONS
EXTENSIONS = (".json", ".jsonl", ".ndjson")


def parse_lines(lines: Sequence[bytes], schema: pa.Schema | None) -> pa.Table:
    """Parse JSON lines with pyarrow; ``schema`` (when given) fixes the types and refuses other keys.

    Raises ``pa.ArrowInvalid`` for lines that do not fit; ``explain_json_error`` says why.
    """
    data = b"\n".join(lines) + b"\n"
    read = pjson.ReadOptions(block_size=max(len(data) + 1, 1 << 16))
    parse = pjson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error" if schema else "infer")
    return pjson.read_json(io.BytesIO(data), read_options=read, parse_options=parse)


@dataclass(frozen=True, slots=True)
class JsonFileRead:
    """Read one JSON file as ``_rowid`` + ``columns`` tables of ``batch_rows`` rows."""

    path: str
    prefix: str
    schema: pa.Schema
    """The source's whole schema: every line is checked against all of it."""
    columns: tuple[str, ...]
    batch_rows: int
    encoding: TextEncoding
    window: InferenceWindow
    position: int

    def __call__(self) -> Iterator[pa.Table]:
        return counted_invalid_utf8(self.path, self.decoded())

    def decoded(self) -> Iterator[tuple[pa.Table, int]]:
        file = Path(self.path)
        array = is_array_file(file, self.encoding)
        row = 0
        for batch in iter_batches(file, self.encoding, self.batch_rows):
            yield self._table(batch, row, array), batch.replaced
            row += len(batch.lines)

    def _table(self, batch: LineBatch, row: int, array: bool) -> pa.Table:
        try:
            table = parse_lines(batch.lines, self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            context = JsonContext(self.path, array, self.window, self.position, row)
            raise explain_json_error(error, batch.lines, batch.wheres, self.schema, parse_lines, context) from error
        return with_rowids(table.select(list(self.columns)), numbered_ids(row, len(batch.lines), self.prefix))


@dataclass(frozen=True)
class JsonSource:
    """A JSON source, e.g. ``JsonSource.open("reviews.jsonl", {})``."""

    files: FileSet
    arrow_schema: pa.Schema
    bytes_per_row: float
    encoding: TextEncoding
    window: InferenceWindow
    kind: str = "json"

    @classmethod
    def open(cls, path: str | None, options: Options) -> JsonSource:
        check_options("json", options, OPTIONS)
        files = resolve_files(path, "json", EXTENSIONS, option_str(options, "glob"))
        encoding = encoding_option(options)
        window = InferenceWindow(
            "infer_rows", "rows", option_int(options, "infer_rows", 1000), option_int(options, "infer_files", 8)
        )
        schemas: list[pa.Schema] = []
        sampled_bytes = 0
        sampled_rows = 0
        for position, file in enumerate(files.files):
            if len(schemas) >= window.files:
                break
            sample = next(iter_batches(file, encoding, window.amount), None)
            if sample is not None:
                schemas.append(_infer(file, sample, encoding, window, position))
                sampled_rows += len(sample.lines)
                sampled_bytes += sum(len(line) + 1 for line in sample.lines)
        if not schemas:
            what = f"JSON file {files.path!r} is" if not files.multi else f"every JSON file in {files.path!r} is"
            raise SourceError(f"{what} empty (no objects); give a source with at least one row")
        schema = unify_schemas(schemas)
        check_column_names(schema, f"JSON {files.path!r}")
        return cls(
            files=files,
            arrow_schema=schema,
            bytes_per_row=max(sampled_bytes / sampled_rows, 1.0),
            encoding=encoding,
            window=window,
        )

    def schema(self) -> pa.Schema:
        return self.arrow_schema

    def estimated_rows(self) -> int | None:
        return sum(self._file_rows(file) for file in self.files.files)

    def read_tasks(self, columns: Sequence[str] | None, batch_rows: int) -> list[ReadTask]:
        check_batch_rows(batch_rows)
        names = tuple(select_columns(self.arrow_schema, columns, f"JSON {self.files.path!r}"))
        return [
            ReadTask(
                read=self._file_read(position, names, batch_rows),
                estimated_rows=self._file_rows(file),
                estimated_bytes=file.stat().st_size,
                input_files=(str(file),),
            )
            for position, file in enumerate(self.files.files)
        ]

    def invalid_utf8_count(self) -> int:
        """Rows whose bad UTF-8 became U+FFFD; always 0 unless ``encoding_errors="replace"``."""
        return self._invalid_utf8

    @cached_property
    def _invalid_utf8(self) -> int:
        if not self.encoding.lenient_utf8:
            return 0
        return sum(
            sum(batch.replaced for batch in iter_batches(file, self.encoding, 1 << 16))
            for file in self.files.files
            if not file_is_valid_utf8(file)
        )

    def _file_read(self, position: int, names: tuple[str, ...], batch_rows: int) -> JsonFileRead:
        file = self.files.files[position]
        return JsonFileRead(
            path=str(file),
            prefix=file_prefix(self.files.prefix(file)),
            schema=self.arrow_schema,
            columns=names,
            batch_rows=batch_rows,
            encoding=self.encoding,
            window=self.window,
            position=position,
        )

    def _file_rows(self, file: Path) -> int:
        return round(file.stat().st_size / self.bytes_per_row)


def _infer(file: Path, sample: LineBatch, encoding: TextEncoding, window: InferenceWindow, position: int) -> pa.Schema:
    try:
        return parse_lines(sample.lines, None).schema
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        context = JsonContext(str(file), is_array_file(file, encoding), window, position, 0)
        raise explain_json_error(error, sample.lines, sample.wheres, None, parse_lines, context) from error
