"""Commits of workers away from the driver's node, through the object store (``Settings.state_uri``).

A journal commit (an fsync'd append under ``flock``, the fence read under the same lock) needs the
run's folder, which only the driver's node sees unless the state folder is shared. A worker whose
node is not the driver's (``BatchLedger.away``) commits each batch as write-once objects instead:

    <state_uri>/runs/<run_id>/batches/<op>/<batch>-a<attempt>-<random>.parquet   its table, when not
                                                                              inline; written first
    <state_uri>/runs/<run_id>/commits/<node><writer>-<seq:08d>.jsonl         its batch_committed record
    <state_uri>/runs/<run_id>/attempt                                        the fence, as a resume set it

``<node>`` is the first 12 digits of the worker's Ray node id (to tell where a commit came from);
``<writer>`` is random per ledger and process, so no two writers share a name, and the commit object
is written after the table: it is the commit point, as the record is in the journal. The driver
merges new commit objects into its journal whenever its mirror pushes (every ``state_sync_s``, after
its own records, and when the attempt ends): it fetches the table into the run folder, then appends
the record under the journal's lock with ``origin`` naming the object, once. The fence is read under
that lock: a commit of an attempt older than the fence is appended as ``batch_refused`` instead. A
resume merges every object present before it moves the fence; so, as in the journal, a commit an
orphaned worker stored before the resume counts, and one stored after it is refused.

On the driver's node a ledger with a store journals each commit as before and then stores it as such
an object too, its record's ``origin`` naming it: merges skip an object whose origin the journal holds,
and a resume from the store (the driver's folder lost) merges the ones its pulled journal lacks.

Until it is merged a commit object is already final: ledgers on every node read the commit objects
on a miss (so a task retried after its node died finds its batches), a resume merges them, and
``semray runs ls|show`` from another machine count them.

>>> merger = CommitMerger(open_store("s3://bucket/semray"), run_dir)  # doctest: +SKIP
>>> merger.merge()  # records appended to the journal  # doctest: +SKIP
1
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from pathlib import Path

import pyarrow.fs as pafs

from semray.log import get_logger
from semray.transactions.durability import make_directory_durably, write_bytes_atomically
from semray.transactions.fence import current_attempt
from semray.transactions.journal import JOURNAL_NAME, JournalWriter, parse_journal_bytes, read_journal
from semray.transactions.records import (
    RECORD_ADAPTER,
    BatchCommitted,
    BatchRefused,
    JournalRecord,
    Record,
    encode_record,
    refusal,
)
from semray.transactions.remote import StateStore

log = get_logger(__name__)

COMMITS = "commits"
STORE_FENCE = "attempt"
"""The store's copy of the run's fence (``fence.FENCE_NAME``), written by each resume before it
moves the local one; workers away from the driver read it before each model call and commit."""


def commit_names(store: StateStore, run_id: str) -> list[str]:
    """Names of the run's commit objects, in name order (one LIST)."""
    selector = pafs.FileSelector(store.run_path(run_id, COMMITS), allow_not_found=True)
    infos = store.fs.get_file_info(selector)
    names = (info.base_name for info in infos if info.type == pafs.FileType.File)
    return sorted(name for name in names if name.endswith(".jsonl"))


def origin_of(name: str) -> str:
    return f"{COMMITS}/{name}"


def read_commit(store: StateStore, run_id: str, name: str) -> BatchCommitted | None:
    """The record a commit object holds, its ``origin`` set; None (logged) for a damaged object."""
    path = store.run_path(run_id, COMMITS, name)
    records, _skipped, _end = parse_journal_bytes(store.read(path), RECORD_ADAPTER, path)
    for record in records:
        if isinstance(record, BatchCommitted):
            return record.model_copy(update={"origin": origin_of(name)})
    log.warning("commit_object_unreadable", run_id=run_id, uri=store.uri, name=name)  # written whole: damage
    return None


def write_commit(store: StateStore, run_id: str, name: str, record: BatchCommitted) -> None:
    store.write_once(store.run_path(run_id, COMMITS, name), encode_record(record))


def store_fence(store: StateStore, run_id: str) -> int | None:
    """The attempt a resume wrote to the store's fence; None before any resume (attempt 1 is current)."""
    data = store.read_if_exists(store.run_path(run_id, STORE_FENCE))
    try:
        return None if data is None else int(data.strip())
    except ValueError:
        log.warning("store_fence_unreadable", run_id=run_id, uri=store.uri)
        return None


def write_store_fence(store: StateStore, run_id: str, attempt: int) -> None:
    store.write(store.run_path(run_id, STORE_FENCE), f"{attempt}\n".encode())


def as_merged(record: BatchCommitted, current: int) -> BatchCommitted | BatchRefused:
    """What merging a commit object appends while attempt ``current`` holds the fence."""
    return refusal(record, current) if record.attempt < current else record


def merged_origins(records: Iterable[JournalRecord]) -> set[str]:
    return {r.origin for r in records if isinstance(r, BatchCommitted | BatchRefused) and r.origin is not None}


def pending_commits(
    store: StateStore, run_id: str, records: Iterable[JournalRecord], current: int
) -> list[BatchCommitted | BatchRefused]:
    """The run's commit objects not merged into ``records`` yet, as a merge would append them now."""
    merged = merged_origins(records)
    found = (read_commit(store, run_id, name) for name in commit_names(store, run_id) if origin_of(name) not in merged)
    return [as_merged(record, current) for record in found if record is not None]


class CommitReader:
    """A ledger's reader of one run's commit objects: each ``new`` call returns the ones not seen before."""

    def __init__(self, store: StateStore, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self._seen: set[str] = set()

    def new(self, known: Container[str] = ()) -> list[BatchCommitted]:
        """The records of objects not seen before; ``known``: origins whose records the caller has (from
        the journal: the driver's node stores each of its commits as an object too), not fetched."""
        found: list[BatchCommitted] = []
        for name in commit_names(self.store, self.run_id):
            if name not in self._seen:
                self._seen.add(name)
                if origin_of(name) in known:
                    continue
                record = read_commit(self.store, self.run_id, name)
                if record is not None:
                    found.append(record)
        return found


class SegmentReader:
    """Reads a run's journal segments from the store incrementally (each segment holds whole lines)."""

    def __init__(self, store: StateStore, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self._read = 0

    def new_records(self) -> tuple[JournalRecord, ...]:
        segments = self.store.segments(self.run_id)
        fresh = segments[self._read :]
        self._read = len(segments)
        data = b"".join(self.store.read(segment.path) for segment in fresh)
        records, _skipped, _end = parse_journal_bytes(data, RECORD_ADAPTER, self.store.run_path(self.run_id))
        return records


class CommitMerger:
    """The driver's side: appends a run's new commit objects to its journal, each once."""

    def __init__(self, store: StateStore, run_dir: Path) -> None:
        self.store = store
        self.run_dir = run_dir
        self._offset = 0
        self._merged: set[str] = set()

    def merge(self) -> int:
        """Merge what is new (one LIST when nothing is); returns the records appended."""
        names = self._unmerged(commit_names(self.store, self.run_dir.name))
        if not names:
            return 0
        fetched = self._fetch(names)
        writer = JournalWriter(self.run_dir / JOURNAL_NAME)
        try:
            with writer.locked() as append:
                return self.merge_locked(append, fetched)
        finally:
            writer.close()

    def merge_locked(self, append: Callable[[Record], None], fetched: list[BatchCommitted] | None = None) -> int:
        """Merge holding the journal's lock (a resume does, before it moves the fence)."""
        if fetched is None:
            fetched = self._fetch(self._unmerged(commit_names(self.store, self.run_dir.name)))
        self._catch_up()  # under the lock: what another merge appended is seen
        # The store's fence too: a copy pulled from the store has no local fence of a resume made elsewhere.
        current = max(current_attempt(self.run_dir) or 1, store_fence(self.store, self.run_dir.name) or 1)
        appended = 0
        for record in fetched:
            if record.origin is None or record.origin in self._merged:
                continue
            append(as_merged(record, current))
            self._merged.add(record.origin)
            appended += 1
        if appended:
            log.info("run_commits_merged", run_id=self.run_dir.name, uri=self.store.uri, records=appended)
        return appended

    def _unmerged(self, names: list[str]) -> list[str]:
        self._catch_up()
        return [name for name in names if origin_of(name) not in self._merged]

    def _catch_up(self) -> None:
        read = read_journal(self.run_dir / JOURNAL_NAME, offset=self._offset, include_unterminated=False)
        self._offset = read.end_offset
        self._merged |= merged_origins(read.records)

    def _fetch(self, names: list[str]) -> list[BatchCommitted]:
        """Read the objects and copy their tables into the run folder (before their records land)."""
        records: list[BatchCommitted] = []
        for name in names:
            record = read_commit(self.store, self.run_dir.name, name)
            if record is None:
                self._merged.add(origin_of(name))  # damaged: never merged, not read again
                continue
            local = self.run_dir / record.file
            if record.file and not local.is_file():
                make_directory_durably(local.parent)
                data = self.store.read(self.store.run_path(self.run_dir.name, *Path(record.file).parts))
                write_bytes_atomically(local, data)
            records.append(record)
        return records
