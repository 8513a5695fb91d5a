"""A folder of text files: one row per file with columns ``path`` (relative) and ``text``.

The row id is the relative path. Read tasks cover chunks of the sorted file list;
reading only ``path`` never opens a file. ``text`` is the whole file decoded with the
``encoding`` option (UTF-8 by default) without a leading byte-order mark; NUL bytes and
CRLF line ends are kept as they are. A file that does not decode fails the read with a
SourceError naming the byte offset, unless ``encoding_errors="replace"``, which turns
bad bytes into U+FFFD and reports each affected file once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pyarrow as pa

from semray.errors import SourceError
from semray.sources.base import (
    Options,
    ReadTask,
    check_batch_rows,
    check_options,
    option_int,
    option_str,
    select_columns,
)
from semray.sources.encoding import ENCODING_OPTIONS, UTF8, TextEncoding, encoding_option
from semray.sources.paths import FileSet, read_bytes, resolve_files
from semray.sources.rowids import with_rowids
from semray.sources.utf8 import file_is_valid_utf8, report_invalid_utf8

OPTIONS = frozenset({"glob", "files_per_task"}) | ENCODING_OPTIONS
SCHEMA = pa.schema([pa.field("path", pa.string()), pa.field("text", pa.string())])


@dataclass(frozen=True, slots=True)
class TextFilesRead:
    """Read ``paths`` (relative to ``root``) as rows of ``columns`` in ``batch_rows`` batches."""

    root: str
    paths: tuple[str, ...]
    columns: tuple[str, ...]
    batch_rows: int
    encoding: TextEncoding = UTF8

    def __call__(self) -> Iterator[pa.Table]:
        for start in range(0, len(self.paths), self.batch_rows):
            chunk = self.paths[start : start + self.batch_rows]
            ids = pa.array(chunk, type=pa.string())
            arrays: list[pa.Array] = []
            if "path" in self.columns:
                arrays.append(ids)
            if "text" in self.columns:
                arrays.append(pa.array([self._text(path) for path in chunk], type=pa.string()))
            table = pa.Table.from_arrays(arrays, schema=pa.schema([SCHEMA.field(name) for name in self.columns]))
            yield with_rowids(table, ids)

    def _text(self, relative: str) -> str:
        file = Path(self.root) / relative
        text, replaced = self.encoding.decode(read_bytes(file), str(file))
        if replaced:
            report_invalid_utf8(str(file), 1)
        return text


@dataclass(frozen=True)
class TextFolderSource:
    """Text files under a folder, e.g. ``TextFolderSource.open("docs/", {"glob": "**/*.md"})``."""

    files: FileSet
    files_per_task: int
    encoding: TextEncoding = UTF8
    kind: str = "text"

    @classmethod
    def open(cls, path: str | None, options: Options) -> TextFolderSource:
        check_options("text", options, OPTIONS)
        files = resolve_files(path, "text", (), option_str(options, "glob"))
        if not files.multi:
            # One file is a folder of one: its row id is its name.
            files = FileSet(path=files.path, root=files.root, files=files.files, multi=True)
        return cls(
            files=files, files_per_task=option_int(options, "files_per_task", 1024), encoding=encoding_option(options)
        )

    def schema(self) -> pa.Schema:
        return SCHEMA

    def estimated_rows(self) -> int | None:
        return len(self.files.files)

    def read_tasks(self, columns: Sequence[str] | None, batch_rows: int) -> list[ReadTask]:
        check_batch_rows(batch_rows)
        names = tuple(select_columns(SCHEMA, columns, f"text folder {self.files.path!r}"))
        relative = [self.files.relative(file) for file in self.files.files]
        tasks = []
        for start in range(0, len(relative), self.files_per_task):
            chunk = self.files.files[start : start + self.files_per_task]
            read = TextFilesRead(
                root=str(self.files.root),
                paths=tuple(relative[start : start + self.files_per_task]),
                columns=names,
                batch_rows=batch_rows,
                encoding=self.encoding,
            )
            size = sum(_size(file) for file in chunk) if "text" in names else 0
            tasks.append(
                ReadTask(read=read, estimated_rows=len(chunk), estimated_bytes=size, input_files=tuple(map(str, chunk)))
            )
        return tasks

    def invalid_utf8_count(self) -> int:
        return self._invalid_utf8

    @cached_property
    def _invalid_utf8(self) -> int:
        """Files with bad UTF-8 (0 unless ``encoding_errors="replace"``); reads every file once, so only when asked."""
        if not self.encoding.lenient_utf8:
            return 0
        return sum(not file_is_valid_utf8(file) for file in self.files.files)


def _size(file: Path) -> int:
    try:
        return file.stat().st_size
    except OSError as error:
        raise SourceError(f"cannot read {str(file)!r}: {error.strerror or error}") from error
