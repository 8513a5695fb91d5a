"""CSV files (one file, a folder or a glob): one read task per file, streamed in batches.

Types are inferred on the driver from the first block of the first few files and
given to ``pyarrow.csv.open_csv`` explicitly. String columns are read as binary and
decoded leniently, so bad UTF-8 becomes U+FFFD instead of failing the read.
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
    check_no_rowid,
    check_options,
    option_bool,
    option_int,
    option_str,
    select_columns,
)
from semray.sources.inference import unify_schemas
from semray.sources.paths import FileSet, resolve_files
from semray.sources.rowids import file_prefix, numbered_ids, rebatch, with_rowids
from semray.sources.utf8 import binary_columns_to_string, counted_invalid_utf8, file_is_valid_utf8

OPTIONS = frozenset({"delimiter", "quote_char", "header", "glob", "infer_bytes", "infer_files"})
EXTENSIONS = (".csv", ".tsv", ".csv.gz", ".tsv.gz")
_NULLS = [""]


@dataclass(frozen=True, slots=True)
class CsvFormat:
    """How to parse the files: ``CsvFormat(delimiter=",", quote_char='"', header=True)``."""

    delimiter: str = ","
    quote_char: str = '"'
    header: bool = True

    def read_options(self, block_size: int) -> pcsv.ReadOptions:
        return pcsv.ReadOptions(block_size=block_size, autogenerate_column_names=not self.header)

    def parse_options(self) -> pcsv.ParseOptions:
        return pcsv.ParseOptions(delimiter=self.delimiter, quote_char=self.quote_char)

    def convert_options(self, types: pa.Schema | None, include: Sequence[str] | None) -> pcsv.ConvertOptions:
        return pcsv.ConvertOptions(
            column_types=None if types is None else {f.name: f.type for f in types},
            include_columns=list(include) if include is not None else None,
            include_missing_columns=include is not None,
            null_values=_NULLS,
            strings_can_be_null=True,
        )


@dataclass(frozen=True, slots=True)
class CsvFileRead:
    """Read one CSV file as ``_rowid`` + ``columns`` tables of ``batch_rows`` rows."""

    path: str
    prefix: str
    fmt: CsvFormat
    read_types: pa.Schema
    """Every column's type as read: string columns as binary, decoded afterwards."""
    columns: tuple[str, ...]
    text_columns: frozenset[str]
    block_size: int
    batch_rows: int

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
        try:
            reader = pcsv.open_csv(
                self.path,
                read_options=self.fmt.read_options(self.block_size),
                parse_options=self.fmt.parse_options(),
                convert_options=self.fmt.convert_options(self.read_types, include),
            )
            yield from reader
        except pa.ArrowInvalid as error:
            if "Empty CSV file" in str(error):
                return
            raise SourceError(
                f"cannot read CSV {self.path!r}: {error}; column types were inferred from the first rows, "
                "so raise the infer_bytes option if a later value has another type"
            ) from error
        except OSError as error:
            raise SourceError(f"cannot read CSV {self.path!r}: {error}") from error


@dataclass(frozen=True)
class CsvSource:
    """A CSV source, e.g. ``CsvSource.open("reviews.csv", {"delimiter": ";"})``."""

    files: FileSet
    fmt: CsvFormat
    arrow_schema: pa.Schema
    bytes_per_row: float
    kind: str = "csv"

    @classmethod
    def open(cls, path: str | None, options: Options) -> CsvSource:
        check_options("csv", options, OPTIONS)
        files = resolve_files(path, "csv", EXTENSIONS, option_str(options, "glob"))
        fmt = CsvFormat(
            delimiter=option_str(options, "delimiter", _default_delimiter(files)) or ",",
            quote_char=option_str(options, "quote_char", '"') or '"',
            header=option_bool(options, "header", True),
        )
        infer_bytes = option_int(options, "infer_bytes", 1 << 20)
        schema, bytes_per_row = _infer(files, fmt, infer_bytes, option_int(options, "infer_files", 8))
        check_no_rowid(schema, f"CSV {files.path!r}")
        return cls(files=files, fmt=fmt, arrow_schema=schema, bytes_per_row=bytes_per_row)

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
                read=self._file_read(file, tuple(names), batch_rows, block_size),
                estimated_rows=round(_size(file) / self.bytes_per_row),
                estimated_bytes=_size(file),
                input_files=(str(file),),
            )
            for file in self.files.files
        ]

    def invalid_utf8_count(self) -> int:
        return self._invalid_utf8

    @cached_property
    def _invalid_utf8(self) -> int:
        text = tuple(f.name for f in self.arrow_schema if pa.types.is_string(f.type))
        total = 0
        for file in self.files.files:
            if not text or file_is_valid_utf8(file):
                continue
            read = self._file_read(file, text, 1 << 16, 16 << 20)
            total += sum(hit for _, hit in read.decoded())
        return total

    def _file_read(self, file: Path, names: tuple[str, ...], batch_rows: int, block_size: int) -> CsvFileRead:
        read_types = pa.schema(
            [pa.field(f.name, pa.binary()) if pa.types.is_string(f.type) else f for f in self.arrow_schema]
        )
        return CsvFileRead(
            path=str(file),
            prefix=file_prefix(self.files.prefix(file)),
            fmt=self.fmt,
            read_types=read_types,
            columns=names,
            text_columns=frozenset(f.name for f in self.arrow_schema if pa.types.is_string(f.type)),
            block_size=block_size,
            batch_rows=batch_rows,
        )


def _infer(files: FileSet, fmt: CsvFormat, infer_bytes: int, infer_files: int) -> tuple[pa.Schema, float]:
    """Types from the first block of up to ``infer_files`` non-empty files, and bytes per row."""
    schemas: list[pa.Schema] = []
    sampled_bytes = 0
    sampled_rows = 0
    for file in files.files:
        if len(schemas) >= infer_files:
            break
        if _size(file) == 0:
            continue
        schema, rows = _infer_file(file, fmt, infer_bytes)
        schemas.append(schema)
        if rows:
            sampled_rows += rows
            sampled_bytes += min(_size(file), infer_bytes)
    if not schemas or sampled_rows == 0:
        what = f"CSV file {files.path!r} is empty" if not files.multi else f"every CSV file in {files.path!r} is empty"
        raise SourceError(f"{what} (no data rows); give a source with at least one row")
    schema = unify_schemas(schemas)
    # Binary is how pyarrow infers a column with bad UTF-8; it is text to us.
    schema = pa.schema([pa.field(f.name, pa.string()) if pa.types.is_binary(f.type) else f for f in schema])
    return schema, max(sampled_bytes / sampled_rows, 1.0)


def _infer_file(file: Path, fmt: CsvFormat, infer_bytes: int) -> tuple[pa.Schema, int]:
    try:
        reader = pcsv.open_csv(
            str(file),
            read_options=fmt.read_options(infer_bytes),
            parse_options=fmt.parse_options(),
            convert_options=fmt.convert_options(None, None),
        )
        first = next(iter(reader), None)
    except pa.ArrowInvalid as error:
        if "Empty CSV file" in str(error):
            return pa.schema([]), 0
        raise SourceError(
            f"cannot parse CSV {str(file)!r}: {error}; check the delimiter and quote_char options"
        ) from error
    except PermissionError as error:
        raise SourceError(f"cannot read {str(file)!r}: permission denied; check the file's permissions") from error
    except OSError as error:
        raise SourceError(f"cannot read CSV {str(file)!r}: {error}") from error
    return reader.schema, 0 if first is None else first.num_rows


def _default_delimiter(files: FileSet) -> str:
    """Tab for ``.tsv`` files, else comma; the ``delimiter`` option overrides it."""
    return "\t" if all(file.name.lower().endswith((".tsv", ".tsv.gz")) for file in files.files) else ","


def _size(file: Path) -> int:
    try:
        return file.stat().st_size
    except OSError:
        return 0
