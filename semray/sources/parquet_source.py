"""Parquet (a file, a folder or a glob): one read task per row group or run of small row groups.

Only the requested columns are read. Files of a folder may differ in columns or widen
types; each batch is conformed to the unified schema (missing columns become nulls).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from semray.errors import SourceError
from semray.sources.base import (
    Options,
    ReadTask,
    check_batch_rows,
    check_column_names,
    check_options,
    option_int,
    option_str,
    project_schema,
    select_columns,
)
from semray.sources.paths import FileSet, resolve_files
from semray.sources.rowids import file_prefix, numbered_ids, rebatch, with_rowids

OPTIONS = frozenset({"glob", "task_rows"})
EXTENSIONS = (".parquet", ".pq", ".parq")


@dataclass(frozen=True, slots=True)
class RowGroup:
    """Row group ``index`` of a file, holding rows ``[first_row, first_row + rows)`` of that file."""

    index: int
    first_row: int
    rows: int
    bytes: int


@dataclass(frozen=True, slots=True)
class ParquetFileInfo:
    path: Path
    schema: pa.Schema
    row_groups: tuple[RowGroup, ...]

    @property
    def rows(self) -> int:
        return sum(group.rows for group in self.row_groups)


@dataclass(frozen=True, slots=True)
class ParquetRead:
    """Read consecutive row groups of one file as ``_rowid`` + columns of ``schema``."""

    path: str
    prefix: str
    row_groups: tuple[int, ...]
    first_row: int
    schema: pa.Schema
    """The output columns with their unified types."""
    batch_rows: int

    def __call__(self) -> Iterator[pa.Table]:
        try:
            # pre_buffer=False: with it pyarrow keeps every range read until the file closes, so a task
            # streaming many row groups (a catalog profile of a whole file) would hold them all.
            file = pq.ParquetFile(self.path, pre_buffer=False)
            present = [name for name in self.schema.names if name in file.schema_arrow.names]
            batches = file.iter_batches(batch_size=self.batch_rows, row_groups=list(self.row_groups), columns=present)
            row = self.first_row
            for table in rebatch(batches, self.batch_rows):
                yield with_rowids(_conform(table, self.schema), numbered_ids(row, table.num_rows, self.prefix))
                row += table.num_rows
        except (pa.ArrowInvalid, OSError) as error:
            raise SourceError(f"cannot read parquet {self.path!r}: {error}") from error


@dataclass(frozen=True)
class ParquetSource:
    """A parquet source, e.g. ``ParquetSource.open("events/", {})`` for a folder of files."""

    files: FileSet
    infos: tuple[ParquetFileInfo, ...]
    arrow_schema: pa.Schema
    task_rows: int
    kind: str = "parquet"

    @classmethod
    def open(cls, path: str | None, options: Options) -> ParquetSource:
        check_options("parquet", options, OPTIONS)
        files = resolve_files(path, "parquet", EXTENSIONS, option_str(options, "glob"))
        infos = tuple(_file_info(file) for file in files.files)
        schema = _unify(infos, files.path)
        check_column_names(schema, f"parquet {files.path!r}")
        if sum(info.rows for info in infos) == 0:
            what = f"parquet file {files.path!r} is" if not files.multi else f"every parquet file in {files.path!r} is"
            raise SourceError(f"{what} empty (0 rows); give a source with at least one row")
        return cls(files=files, infos=infos, arrow_schema=schema, task_rows=option_int(options, "task_rows", 1 << 17))

    def schema(self) -> pa.Schema:
        return self.arrow_schema

    def estimated_rows(self) -> int | None:
        return sum(info.rows for info in self.infos)

    def read_tasks(self, columns: Sequence[str] | None, batch_rows: int) -> list[ReadTask]:
        check_batch_rows(batch_rows)
        names = select_columns(self.arrow_schema, columns, f"parquet {self.files.path!r}")
        schema = project_schema(self.arrow_schema, names)
        tasks = []
        for info in self.infos:
            prefix = file_prefix(self.files.prefix(info.path))
            for groups in _runs(info.row_groups, self.task_rows):
                read = ParquetRead(
                    path=str(info.path),
                    prefix=prefix,
                    row_groups=tuple(group.index for group in groups),
                    first_row=groups[0].first_row,
                    schema=schema,
                    batch_rows=batch_rows,
                )
                rows = sum(group.rows for group in groups)
                size = sum(group.bytes for group in groups)
                tasks.append(
                    ReadTask(read=read, estimated_rows=rows, estimated_bytes=size, input_files=(str(info.path),))
                )
        return tasks

    def invalid_utf8_count(self) -> int:
        return 0


def _file_info(file: Path) -> ParquetFileInfo:
    try:
        parquet = pq.ParquetFile(str(file))
    except PermissionError as error:
        raise SourceError(f"cannot read {str(file)!r}: permission denied; check the file's permissions") from error
    except (pa.ArrowInvalid, OSError) as error:
        raise SourceError(f"{str(file)!r} is not a readable parquet file: {error}") from error
    names = parquet.schema_arrow.names
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise SourceError(
            f"parquet file {str(file)!r} has more than one column named {', '.join(map(repr, repeated))}; semray "
            "could read only one of them, so rewrite the file with distinct column names"
        )
    meta = parquet.metadata
    groups = []
    first = 0
    for index in range(meta.num_row_groups):
        group = meta.row_group(index)
        groups.append(RowGroup(index=index, first_row=first, rows=group.num_rows, bytes=group.total_byte_size))
        first += group.num_rows
    return ParquetFileInfo(path=file, schema=parquet.schema_arrow, row_groups=tuple(groups))


def _unify(infos: Sequence[ParquetFileInfo], path: str) -> pa.Schema:
    try:
        return pa.unify_schemas([info.schema for info in infos], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise SourceError(f"the parquet files in {path!r} have incompatible schemas: {error}") from error


def _runs(groups: Sequence[RowGroup], task_rows: int) -> Iterator[tuple[RowGroup, ...]]:
    """Consecutive non-empty row groups, merged while a run stays under ``task_rows`` rows."""
    run: list[RowGroup] = []
    held = 0
    for group in groups:
        if group.rows == 0:
            continue
        if run and held + group.rows > task_rows:
            yield tuple(run)
            run, held = [], 0
        run.append(group)
        held += group.rows
    if run:
        yield tuple(run)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Columns of ``schema`` in its order and types; a column this file lacks becomes nulls."""
    columns = [
        table.column(field.name).cast(field.type)
        if field.name in table.column_names
        else pa.nulls(table.num_rows, field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema) if columns else table.select([])
