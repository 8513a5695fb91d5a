"""CSV files (one file, a folder or a glob): one read task per file, streamed in batches.

Types are inferred on the driver from the first block of the first few files and
given to ``pyarrow.csv.open_csv`` explicitly. Bytes go through ``CheckedInput``, which
fails on bytes the ``encoding`` option cannot decode (UTF-8 by default) and transcodes
other encodings; with ``encoding_errors="replace"``, UTF-8 string columns are read as
binary and decoded leniently, so bad UTF-8 becomes U+FFFD, counted and logged.

Nothing is dropped silently: a header with an empty or repeated name, a file with a
column the schema lacks, a quote never closed, and a later value of another type
each fail with a SourceError that names the file, the column or row, and the fix.
Quoted values may span lines; a row longer than the block size is retried with
larger blocks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv

from semray.errors import SourceError
from semray.sources.base import (
    Options,
    ReadTask,
    check_batch_rows,
    check_column_names,
    check_options,
    option_bool,
    option_int,
    option_str,
    select_columns,
)
from semray.sources.checked_input import CheckedInput
from semray.sources.csv_diagnosis import (
    STRADDLING,
    check_header,
    check_known_columns,
    explain_columns,
    explain_conversion,
    too_long,
)
from semray.sources.csv_quotes import find_unterminated_quote, unterminated_quote_error
from semray.sources.encoding import ENCODING_OPTIONS, UTF8, TextEncoding, encoding_option
from semray.sources.inference import InferenceWindow, unify_schemas
from semray.sources.paths import FileSet, resolve_files
from semray.sources.rowids import file_prefix, numbered_ids, rebatch, with_rowids
from semray.sources.utf8 import binary_columns_to_string, counted_invalid_utf8, file_is_valid_utf8

OPTIONS = frozenset({"delimiter", "quote_char", "header", "glob", "infer_bytes", "infer_files"}) | ENCODING_OPTIONS
EXTENSIONS = (".csv", ".tsv", ".csv.gz", ".tsv.gz")
_NULLS = [""]
_HEADER_BLOCK = 64 << 10
MAX_BLOCK = 1 << 30
"""The largest block (so the longest row) the reader tries before it gives up."""


@dataclass(frozen=True, slots=True)
class CsvFormat:
    """How to parse the files: ``CsvFormat(delimiter=",", quote_char='"', header=True)``."""

    delimiter: str = ","
    quote_char: str = '"'
    header: bool = True
    encoding: TextEncoding = UTF8

    def __post_init__(self) -> None:
        for option, value in (("delimiter", self.delimiter), ("quote_char", self.quote_char)):
            if len(value) != 1 or value in "\r\n":
                raise SourceError(
                    f"the CSV option {option}={value!r} must be one character other than a line break, "
                    "e.g. ';' or '\\t'"
                )
        if self.delimiter == self.quote_char:
            raise SourceError(
                f"the CSV delimiter and quote_char are both {self.delimiter!r}; give them different characters"
            )

    def read_options(self, block_size: int, use_threads: bool = True) -> pcsv.ReadOptions:
        return pcsv.ReadOptions(
            block_size=block_size, autogenerate_column_names=not self.header, use_threads=use_threads
        )

    def parse_options(self) -> pcsv.ParseOptions:
        return pcsv.ParseOptions(delimiter=self.delimiter, quote_char=self.quote_char, newlines_in_values=True)

    def convert_options(self, types: pa.Schema | None, include: Sequence[str] | None) -> pcsv.ConvertOptions:
        return pcsv.ConvertOptions(
            column_types=None if types is None else {f.name: f.type for f in types},
            include_columns=list(include) if include is not None else None,
            include_missing_columns=include is not None,
            null_values=_NULLS,
            strings_can_be_null=True,
        )

    def open(self, path: str, report: bool = False) -> CheckedInput:
        """The file's bytes as UTF-8 for pyarrow, with its quotes counted; ``report`` logs replaced bytes."""
        return CheckedInput(path, self.encoding, self.quote_char.encode("utf-8"), report)

    def check_quotes(self, source: CheckedInput) -> None:
        """After ``source`` was read to its end: raise if a quoted value is never closed."""
        if source.at_end and source.quotes % 2:
            line = find_unterminated_quote(source.path, self.delimiter, self.quote_char, self.encoding)
            if line is not None:
                raise unterminated_quote_error(source.path, line, self.quote_char)


def header_names(path: str, fmt: CsvFormat, block_size: int = _HEADER_BLOCK) -> list[str]:
    """The file's column names (``f0, f1, ...`` without a header); ``[]`` for an empty file."""
    while True:
        try:
            with fmt.open(path) as source:
                reader = pcsv.open_csv(
                    source,
                    read_options=fmt.read_options(block_size, use_threads=False),
                    parse_options=fmt.parse_options(),
                    convert_options=fmt.convert_options(None, None),
                )
                return list(reader.schema.names)
        except pa.ArrowInvalid as error:
            if "Empty CSV file" in str(error):
                return []
            block_size = _wider_block(error, path, fmt, block_size)


@dataclass(frozen=True, slots=True)
class CsvFileRead:
    """Read one CSV file as ``_rowid`` + ``columns`` tables of ``batch_rows`` rows."""

    path: str
    prefix: str
    fmt: CsvFormat
    read_types: pa.Schema
    """Every column's type as read: with lenient UTF-8, string columns as binary, decoded afterwards."""
    columns: tuple[str, ...]
    text_columns: frozenset[str]
    block_size: int
    batch_rows: int
    window: InferenceWindow
    position: int
    """The file's index in the source, to say how far ``infer_files`` must reach."""

    def __call__(self) -> Iterator[pa.Table]:
        return counted_invalid_utf8(self.path, self.decoded())

    def decoded(self) -> Iterator[tuple[pa.Table, int]]:
        """Yield each output table with its number of rows that had bad UTF-8."""
        # include_columns=[] would mean "all columns"; read the first one and drop it.
        include = list(self.columns) or [self.read_types.names[0]]
        row = 0
        for raw in rebatch(self._stream(include), self.batch_rows):
            table = raw if self.columns else raw.drop_columns(include)
            table, hit = binary_columns_to_string(table, self.text_columns & set(self.columns))
            yield with_rowids(table, numbered_ids(row, raw.num_rows, self.prefix)), hit
            row += raw.num_rows

    def _stream(self, include: list[str]) -> Iterator[pa.RecordBatch]:
        names = header_names(self.path, self.fmt)
        if not names:
            return
        if self.fmt.header:
            check_header(names, self.path)
        check_known_columns(names, self.read_types.names, self.path, self.window.advice(self.position, None))
        emitted = 0
        block_size = self.block_size
        while True:
            try:
                # After a retry with larger blocks, skip the rows already given out.
                seen = 0
                for batch in self._batches(include, block_size):
                    start = max(emitted - seen, 0)
                    seen += batch.num_rows
                    if start < batch.num_rows:
                        part = batch.slice(start) if start else batch
                        emitted += part.num_rows
                        yield part
                return
            except pa.ArrowInvalid as error:
                if STRADDLING in str(error) and block_size < MAX_BLOCK:
                    block_size = min(block_size * 4, MAX_BLOCK)
                    continue
                raise self._explain(error, names, include, block_size) from error
            except OSError as error:
                raise SourceError(f"cannot read CSV {self.path!r}: {error}") from error

    def _batches(self, include: list[str], block_size: int, diagnosis: bool = False) -> Iterator[pa.RecordBatch]:
        """The file's record batches; a ``diagnosis`` pass runs on one thread (so errors number rows), unlogged."""
        with self.fmt.open(self.path, report=not diagnosis) as source:
            reader = pcsv.open_csv(
                source,
                read_options=self.fmt.read_options(block_size, use_threads=not diagnosis),
                parse_options=self.fmt.parse_options(),
                convert_options=self.fmt.convert_options(self.read_types, include),
            )
            yield from reader
            self.fmt.check_quotes(source)

    def _explain(self, error: pa.ArrowInvalid, names: list[str], include: list[str], block_size: int) -> SourceError:
        message = str(error)
        if STRADDLING in message:
            return too_long(self.path, block_size)
        if "Row #" not in message:
            # Only a single-threaded read numbers the rows in its errors.
            message = self._single_threaded_error(include, block_size) or message
        advice = self.window.advice(self.position, _content_size(self.path))
        explained = explain_conversion(
            message, self.path, names, self.fmt.header, self.prefix, self.window, advice
        ) or explain_columns(message, self.path, self.fmt.header, self.fmt.delimiter)
        if explained is not None:
            return explained
        return SourceError(f"cannot read CSV {self.path!r}: {message}; check the delimiter and quote_char options")

    def _single_threaded_error(self, include: list[str], block_size: int) -> str | None:
        try:
            for _ in self._batches(include, block_size, diagnosis=True):
                pass
        except pa.ArrowInvalid as error:
            return str(error)
        return None


@dataclass(frozen=True)
class CsvSource:
    """A CSV source, e.g. ``CsvSource.open("reviews.csv", {"delimiter": ";"})``."""

    files: FileSet
    fmt: CsvFormat
    arrow_schema: pa.Schema
    bytes_per_row: float
    window: InferenceWindow
    kind: str = "csv"

    @classmethod
    def open(cls, path: str | None, options: Options) -> CsvSource:
        check_options("csv", options, OPTIONS)
        files = resolve_files(path, "csv", EXTENSIONS, option_str(options, "glob"))
        fmt = CsvFormat(
            delimiter=_given(option_str(options, "delimiter"), _default_delimiter(files)),
            quote_char=_given(option_str(options, "quote_char"), '"'),
            header=option_bool(options, "header", True),
            encoding=encoding_option(options),
        )
        window = InferenceWindow(
            "infer_bytes", "bytes", option_int(options, "infer_bytes", 1 << 20), option_int(options, "infer_files", 8)
        )
        schema, bytes_per_row = _infer(files, fmt, window)
        check_column_names(schema, f"CSV {files.path!r}")
        return cls(files=files, fmt=fmt, arrow_schema=schema, bytes_per_row=bytes_per_row, window=window)

    def schema(self) -> pa.Schema:
        return self.arrow_schema

    def estimated_rows(self) -> int | None:
        return round(sum(_size(file) for file in self.files.files) / self.bytes_per_row)

    def read_tasks(self, columns: Sequence[str] | None, batch_rows: int) -> list[ReadTask]:
        check_batch_rows(batch_rows)
        names = select_columns(self.arrow_schema, columns, f"CSV {self.files.path!r}")
        block_size = int(min(max(self.bytes_per_row * batch_rows, 64 << 10), 16 << 20))
        return [
            ReadTask(
                read=self._file_read(position, tuple(names), batch_rows, block_size),
                estimated_rows=round(_size(file) / self.bytes_per_row),
                estimated_bytes=_size(file),
                input_files=(str(file),),
            )
            for position, file in enumerate(self.files.files)
        ]

    def invalid_utf8_count(self) -> int:
        """Rows whose bad UTF-8 became U+FFFD; always 0 unless ``encoding_errors="replace"``."""
        return self._invalid_utf8

    @cached_property
    def _invalid_utf8(self) -> int:
        if not self.fmt.encoding.lenient_utf8:
            return 0
        text = tuple(f.name for f in self.arrow_schema if pa.types.is_string(f.type))
        total = 0
        for position, file in enumerate(self.files.files):
            if not text or file_is_valid_utf8(file):
                continue
            read = self._file_read(position, text, 1 << 16, 16 << 20)
            total += sum(hit for _, hit in read.decoded())
        return total

    def _file_read(self, position: int, names: tuple[str, ...], batch_rows: int, block_size: int) -> CsvFileRead:
        file = self.files.files[position]
        lenient = self.fmt.encoding.lenient_utf8
        text = frozenset(f.name for f in self.arrow_schema if lenient and pa.types.is_string(f.type))
        read_types = pa.schema([pa.field(f.name, pa.binary()) if f.name in text else f for f in self.arrow_schema])
        return CsvFileRead(
            path=str(file),
            prefix=file_prefix(self.files.prefix(file)),
            fmt=self.fmt,
            read_types=read_types,
            columns=names,
            text_columns=text,
            block_size=block_size,
            batch_rows=batch_rows,
            window=self.window,
            position=position,
        )


def _infer(files: FileSet, fmt: CsvFormat, window: InferenceWindow) -> tuple[pa.Schema, float]:
    """Types from the first block of up to ``infer_files`` non-empty files, and bytes per row."""
    schemas: list[pa.Schema] = []
    sampled_bytes = 0
    sampled_rows = 0
    for file in files.files:
        if len(schemas) >= window.files:
            break
        if _size(file) == 0:
            continue
        schema, rows = _infer_file(str(file), fmt, window.amount)
        schemas.append(schema)
        if rows:
            sampled_rows += rows
            sampled_bytes += min(_size(file), window.amount)
    if not schemas or sampled_rows == 0:
        what = f"CSV file {files.path!r} is empty" if not files.multi else f"every CSV file in {files.path!r} is empty"
        raise SourceError(f"{what} (no data rows, at most a header); give a source with at least one row")
    schema = unify_schemas(schemas)
    # Binary is how pyarrow infers a column with bad UTF-8 (read leniently); it is text to us.
    schema = pa.schema([pa.field(f.name, pa.string()) if pa.types.is_binary(f.type) else f for f in schema])
    return schema, max(sampled_bytes / sampled_rows, 1.0)


def _wider_block(error: pa.ArrowInvalid, path: str, fmt: CsvFormat, block_size: int) -> int:
    """The block size to retry a read with when its first row is longer than the block (up to
    ``MAX_BLOCK``); any other parse error raises the ``SourceError`` that explains it."""
    if STRADDLING in str(error):
        if block_size < MAX_BLOCK:
            return min(block_size * 4, MAX_BLOCK)
        raise too_long(path, block_size) from error
    explained = explain_columns(str(error), path, fmt.header, fmt.delimiter)
    raise explained or SourceError(
        f"cannot parse CSV {path!r}: {error}; check the delimiter and quote_char options"
    ) from error


def _infer_file(path: str, fmt: CsvFormat, infer_bytes: int) -> tuple[pa.Schema, int]:
    """The types pyarrow infers from the file's first block, and that block's row count."""
    block_size = infer_bytes
    while True:
        try:
            with fmt.open(path) as source:
                reader = pcsv.open_csv(
                    source,
                    read_options=fmt.read_options(block_size, use_threads=False),
                    parse_options=fmt.parse_options(),
                    convert_options=fmt.convert_options(None, None),
                )
                first = next(iter(reader), None)
                fmt.check_quotes(source)
            break
        except pa.ArrowInvalid as error:
            if "Empty CSV file" in str(error):
                return pa.schema([]), 0
            block_size = _wider_block(error, path, fmt, block_size)
        except OSError as error:
            raise SourceError(f"cannot read CSV {path!r}: {error}") from error
    if fmt.header:
        check_header(reader.schema.names, path)
    return reader.schema, 0 if first is None else first.num_rows


def _default_delimiter(files: FileSet) -> str:
    """Tab for ``.tsv`` files, else comma; the ``delimiter`` option overrides it."""
    return "\t" if all(file.name.lower().endswith((".tsv", ".tsv.gz")) for file in files.files) else ","


def _content_size(path: str) -> int:
    """The file's size once decompressed: what ``infer_bytes`` must cover to sample all of it."""
    size = _size(Path(path))
    if not path.lower().endswith(".gz") or size < 4:
        return size
    with open(path, "rb") as stream:
        stream.seek(-4, 2)
        return max(int.from_bytes(stream.read(4), "little"), size)  # gzip's trailer: the size mod 2**32


def _size(file: Path) -> int:
    try:
        return file.stat().st_size
    except OSError:
        return 0


def _given(value: str | None, default: str) -> str:
    """An option's value, or ``default`` when it was not given (an empty string is given)."""
    return default if value is None else value
