"""The append-only run journal: JSON lines, each flushed and fsync'd before ``append`` returns.

Writers in several processes (the driver and Ray actors committing batches) may append
to one journal: each append takes ``flock`` on the file, terminates a torn line left by
a killed writer, writes the whole record with one ``write`` and fsyncs.

Readers never fail on a torn line: a line that is not a complete, valid record (what a
kill or power loss in the middle of an append leaves) is skipped with a warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from semray.log import get_logger
from semray.transactions.durability import fsync_directory
from semray.transactions.records import RECORD_ADAPTER, JournalRecord, Record, encode_record

log = get_logger(__name__)

JOURNAL_NAME = "journal.jsonl"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SkippedLine:
    """A line that is not a valid record: its byte offset, length and why."""

    offset: int
    length: int
    reason: str


@dataclass(frozen=True, slots=True)
class JournalRead:
    """Records read from a journal, the lines skipped, and the offset just after the last line consumed."""

    records: tuple[JournalRecord, ...]
    skipped: tuple[SkippedLine, ...]
    end_offset: int


class JournalWriter:
    """Appends records durably to one journal file; picklable (the file is reopened per process).

    >>> JournalWriter.create(run_dir / "journal.jsonl").append(record)  # doctest: +SKIP
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        # flock excludes other processes; threads of one process share the descriptor's lock.
        self._thread_lock = threading.Lock()

    @classmethod
    def create(cls, path: Path) -> JournalWriter:
        """Create a new, empty journal (failing if it exists) and persist its directory entry."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        os.fsync(fd)
        fsync_directory(path.parent)
        writer = cls(path)
        writer._fd = fd
        return writer

    def append(self, record: Record) -> None:
        """Write one record and return only once it is on disk."""
        with self.locked() as append:
            append(record)

    @contextlib.contextmanager
    def locked(self) -> Iterator[Callable[[Record], None]]:
        """Hold the journal's lock across a check and the appends it decides on.

        What is checked under the lock cannot change before the record lands: a batch commit
        reads the run's fence here, and a resume moves the fence here (``semray.transactions.fence``).

        >>> with writer.locked() as append:  # doctest: +SKIP
        ...     append(record)
        """
        with self._thread_lock:
            fd = self._descriptor()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield lambda record: _append_line(fd, encode_record(record))
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _descriptor(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        return self._fd

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def __del__(self) -> None:
        self.close()


def read_journal(path: Path, offset: int = 0, include_unterminated: bool = True) -> JournalRead:
    """Read records from byte ``offset`` on.

    A final line without its newline counts when it is a complete record (its writer died
    between the write and the fsync); pass ``include_unterminated=False`` to leave it
    for a later read, as incremental readers racing a live writer must.
    """
    records, skipped, end = read_journal_as(path, RECORD_ADAPTER, offset, include_unterminated)
    return JournalRead(records=records, skipped=skipped, end_offset=end)


def read_journal_as(
    path: Path, adapter: TypeAdapter[T], offset: int = 0, include_unterminated: bool = True
) -> tuple[tuple[T, ...], tuple[SkippedLine, ...], int]:
    """``read_journal`` for a journal of other record kinds (an agent trace): records, skipped lines, end offset.

    >>> records, skipped, end = read_journal_as(trace_dir / "journal.jsonl", TRACE_ADAPTER)  # doctest: +SKIP
    """
    with path.open("rb") as handle:
        handle.seek(offset)
        data = handle.read()
    return parse_journal_bytes(data, adapter, str(path), offset, include_unterminated)


def parse_journal_bytes(
    data: bytes, adapter: TypeAdapter[T], source: str, offset: int = 0, include_unterminated: bool = True
) -> tuple[tuple[T, ...], tuple[SkippedLine, ...], int]:
    """``read_journal_as`` over bytes already read (``data`` starts at byte ``offset`` of ``source``),
    e.g. a journal mirrored to an object store (``semray.transactions.remote``).

    >>> parse_journal_bytes(b"not json\n", RECORD_ADAPTER, "x")[1][0].reason  # doctest: +SKIP
    'torn or invalid JSON'
    """
    records: list[T] = []
    skipped: list[SkippedLine] = []
    position = 0
    while position < len(data):
        newline = data.find(b"\n", position)
        terminated = newline != -1
        if not terminated and not include_unterminated:
            break
        end = newline if terminated else len(data)
        line = data[position:end]
        if line.strip():
            parsed, reason = _parse(line, adapter)
            if parsed is not None:
                records.append(parsed[0])
            else:
                skipped.append(SkippedLine(offset=offset + position, length=len(line), reason=reason))
                log.warning(
                    "journal_line_skipped",
                    path=source,
                    offset=offset + position,
                    length=len(line),
                    reason=reason,
                    last_line=not terminated,
                )
        position = end + 1 if terminated else end
    return tuple(records), tuple(skipped), offset + position


def _parse(line: bytes, adapter: TypeAdapter[T]) -> tuple[tuple[T] | None, str]:
    try:
        return (adapter.validate_json(line),), ""
    except ValidationError as error:
        first = error.errors()[0]
        kind = "torn or invalid JSON" if first["type"] == "json_invalid" else first["msg"]
        return None, kind


def _append_line(fd: int, line: bytes) -> None:
    if _ends_torn(fd):
        # A writer died mid-line: end that fragment so this record starts a line of its own.
        _write_all(fd, b"\n")
    _write_all(fd, line)
    os.fsync(fd)


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
