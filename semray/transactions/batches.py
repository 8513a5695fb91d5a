"""Committed batch outputs: stored durably, found again on resume, so no batch is paid for twice.

A small table (up to ``INLINE_BYTES`` as an Arrow IPC stream, e.g. a few hundred rows of filter
answers) travels inside its ``batch_committed`` record: the commit is one journal append, one
fsync. A larger one is written to a temporary file, fsync'd and renamed into place (its folder
fsync'd too); only then is its record appended to the journal. The record is the commit point:
a table without a record (a kill between the two) is ignored and overwritten when the batch is
committed again.

Fencing: a commit is accepted only while its attempt is the run's current one. The record
is appended under the journal's lock after reading the run's fence (``fence.py``) under that
same lock; a writer of an older attempt (an orphaned actor of a killed driver, after a
resume began) gets ``FencedWriterError`` and its batch is journaled as ``batch_refused``.

On another node than the driver's, with an object store (``Settings.state_uri``), a ledger is
``away``: it never opens the run folder, commits write-once objects that the driver merges into
the journal, and lookups read the store (``remote_commits``). On the driver's node, with a store, a
commit is journaled as above and then also stored as such an object (its record's ``origin`` names
it, so no merge appends it twice): it is in the store at commit time, not only at the driver's next
push, and a resume from the store finds it even when the driver's folder is lost.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from semray.log import get_logger
from semray.transactions.durability import fsync_directory, fsync_file, make_directory_durably
from semray.transactions.errors import FencedWriterError, ObjectExistsError, TransactionError
from semray.transactions.fence import stale_against
from semray.transactions.journal import JOURNAL_NAME, JournalWriter, read_journal
from semray.transactions.keys import file_safe
from semray.transactions.records import BatchCommitted, LLMUsage, RowFailures, refusal
from semray.transactions.remote import StateStore, open_store
from semray.transactions.remote_commits import CommitReader, SegmentReader, origin_of, store_fence, write_commit

log = get_logger(__name__)

INLINE_BYTES = 64 * 1024
"""A batch's table up to this size (Arrow IPC stream) is journaled inline in its record: one fsync
a commit instead of three (table, its folder, journal). Larger ones go to a parquet file, so
journals stay small enough to read whole (``semray runs ls``, every actor's ledger)."""

ROW_ID = "_rowid"
"""The plan's row-id column (``semray.operators.schema.ROW_ID``); not imported, as transactions
sits below operators in the import order."""


@dataclass(frozen=True, slots=True)
class RowLookup:
    """Committed output rows for some of the requested row ids, and the row ids still to compute."""

    table: pa.Table | None
    missing: tuple[str, ...]


class BatchLedger:
    """Commit and look up one run's batch outputs; picklable, so Ray actors can hold one.

    >>> ledger.lookup("op3", key) is None  # doctest: +SKIP
    True
    >>> ledger.commit("op3", key, row_ids, table, LLMUsage(calls=4))  # doctest: +SKIP
    """

    def __init__(
        self,
        run_dir: Path,
        attempt: int,
        inline_bytes: int = INLINE_BYTES,
        store_uri: str | None = None,
        home: str | None = None,
    ) -> None:
        """``inline_bytes``: tables up to this size travel in their record (0: every table to a file).

        ``store_uri``: the run's object store (``Settings.state_uri``); ``home``: the node of the run's
        driver, as ``node()`` names it. With both, a ledger in a process on another node is ``away``:
        it commits to the store and reads the run from there (``remote_commits``), and ledgers on
        the driver's node also read the commits stored there that the driver has not merged yet.
        """
        self.run_dir = run_dir
        self.attempt = attempt
        self.inline_bytes = inline_bytes
        self.store_uri = store_uri
        self.home = home
        self._away: bool | None = None
        self._writer = f"a{attempt}-{os.urandom(6).hex()}"
        """This ledger's name for its commit objects: random per process (a copy or an unpickled
        ledger is a new writer), so no two writers share an object name."""
        self._sequence = itertools.count(1)
        self._store_reader: CommitReader | None = None
        self._segment_reader: SegmentReader | None = None
        self._in_store: set[tuple[str, str]] = set()
        """Commits read from the store (their table files are there, maybe not in the run folder)."""
        self._origins: set[str] = set()
        """Commit objects whose records this ledger has read (from the journal or the store): not fetched again."""
        self._journal = JournalWriter(run_dir / JOURNAL_NAME)
        self._committed: dict[tuple[str, str], BatchCommitted] = {}
        self._rows: dict[str, dict[str, str]] = {}
        """Per operator, row id -> key of the first committed batch holding it."""
        self._offset = 0
        self._fenced_by: int | None = None
        """The newer attempt that fenced this writer off; once set, every commit is refused at once."""

    def commit(
        self,
        operator_key: str,
        batch_key: str,
        row_ids: Sequence[str | int],
        table: pa.Table,
        usage: LLMUsage | None = None,
        rows_out: int | None = None,
        failed: Sequence[RowFailures] = (),
    ) -> BatchCommitted:
        """Store ``table`` as the output of this batch, then journal the batch; durable on return.

        ``rows_out``: the rows the operator passes on for this batch (a filter: the kept ones);
        by default the table's rows. ``failed``: rows of the batch that got no answer, by reason
        (not in ``row_ids`` nor ``table``; the run's state counts them per operator).

        Raises ``FencedWriterError`` when a newer attempt of the run has begun (a resume): the
        batch is then journaled as refused (``batch_refused``, with what it paid) instead.
        """
        fenced_before = self._stale() is not None
        inline = encode_inline(table, self.inline_bytes)
        relative: Path | None = None
        if inline is None:
            # A name of its own per commit: a batch committed twice (a retried actor) never
            # overwrites the table its first record points to.
            unique = f"{file_safe(batch_key)}-a{self.attempt}-{os.urandom(4).hex()}.parquet"
            relative = Path("batches") / file_safe(operator_key) / unique
            if not fenced_before:  # a writer already fenced off does not store a table it cannot commit
                self._store_table(relative, table)
        name = self._object_name() if self.store_uri else None
        record = BatchCommitted(
            attempt=self.attempt,
            operator_key=operator_key,
            batch_key=batch_key,
            row_ids=tuple(str(row_id) for row_id in row_ids),
            rows_out=table.num_rows if rows_out is None else rows_out,
            file="" if relative is None else str(relative),
            inline=inline,
            usage=usage or LLMUsage(),
            failed=tuple(failed),
            origin=None if name is None else origin_of(name),
        )
        if self.away:
            assert name is not None
            return self._commit_to_store(record, name)
        with self._journal.locked() as append:
            # The fence is read under the journal's lock, the lock a resume moves it under:
            # the check and the append are one step.
            current = self._stale()
            append(record if current is None else refusal(record, current))
        if current is not None:
            if not fenced_before and relative is not None:
                (self.run_dir / relative).unlink(missing_ok=True)  # never journaled: nothing points to it
            raise self._fence(current)
        if name is not None:
            self._copy_commit(record, name)
        self._remember(record)
        return record

    def raise_if_fenced(self) -> None:
        """Raise ``FencedWriterError`` when a newer attempt of the run has begun.

        Workers call it before each batch's model call, so an orphaned worker of a killed
        driver stops paying as soon as a resume starts. Once fenced, a ledger stays fenced.
        """
        current = self._stale()
        if current is not None:
            raise self._fence(current)

    def _stale(self) -> int | None:
        """The newer attempt that fences this writer off, if any (remembered once seen)."""
        if self._fenced_by is not None:
            return self._fenced_by
        if self.away:
            current = store_fence(self._store, self.run_dir.name)
            return current if current is not None and self.attempt < current else None
        return stale_against(self.run_dir, self.attempt)

    def node(self) -> str | None:
        """The node this process runs on, comparable with ``home``; None where unknown (counted as the
        driver's). Plain ledgers do not know; the pipeline's actor ledger answers with Ray's node id."""
        return None

    @property
    def away(self) -> bool:
        """True in a process on another node than the run's driver, when the run has a store to commit to."""
        if self._away is None:
            here = self.node() if self.home is not None and self.store_uri else None
            self._away = here is not None and here != self.home
        return self._away

    @property
    def _store(self) -> StateStore:
        assert self.store_uri is not None
        return open_store(self.store_uri)

    def _store_table(self, relative: Path, table: pa.Table) -> None:
        if not self.away:
            _write_parquet_durably(self.run_dir / relative, table)
            return
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        self._store.write_once(self._store.run_path(self.run_dir.name, *relative.parts), sink.getvalue().to_pybytes())

    def _object_name(self) -> str:
        """The name of this ledger's next commit object; ``<node>``: for people reading the store."""
        return f"{(self.node() or '')[:12]}{self._writer}-{next(self._sequence):08d}.jsonl"

    def _copy_commit(self, record: BatchCommitted, name: str) -> None:
        """On the driver's node: store a journaled commit as an object too (its table's first), so that
        it outlives the run folder. The journal stays the commit point; a store that fails here is
        logged, and the mirror's next push copies the commit with the journal."""
        try:
            if record.file:
                target = self._store.run_path(self.run_dir.name, *Path(record.file).parts)
                with contextlib.suppress(ObjectExistsError):  # the mirror's push copied it first
                    self._store.write_once(target, (self.run_dir / record.file).read_bytes())
            write_commit(self._store, self.run_dir.name, name, record)
        except (OSError, TransactionError) as error:  # e.g. boto3 missing: the journal is the commit
            log.warning("batch_commit_not_stored", run_id=self.run_dir.name, name=name, error=str(error))

    def _commit_to_store(self, record: BatchCommitted, name: str) -> BatchCommitted:
        """Away from the driver: the commit object is the commit point (after its table's object); the
        driver merges it into the journal, as refused if a resume moved the fence first."""
        write_commit(self._store, self.run_dir.name, name, record)
        current = self._stale()
        if current is not None:
            raise self._fence(current)
        self._remember(record, in_store=True)
        return record

    def _fence(self, current: int) -> FencedWriterError:
        if self._fenced_by is None:
            self._fenced_by = current
            log.warning("batch_writer_fenced", run_id=self.run_dir.name, attempt=self.attempt, current_attempt=current)
        return FencedWriterError(self.run_dir.name, self.attempt, current)

    def committed(self, operator_key: str, batch_key: str) -> BatchCommitted | None:
        """The commit record of a batch, or None when it was never committed."""
        key = (operator_key, batch_key)
        if key not in self._committed:
            self._refresh()
        if key not in self._committed:
            self._refresh_stored()
        return self._committed.get(key)

    def lookup(self, operator_key: str, batch_key: str) -> pa.Table | None:
        """The committed output of a batch, or None: compute it (and commit it)."""
        record = self.committed(operator_key, batch_key)
        if record is None:
            return None
        return self._table(record)

    def lookup_rows(self, operator_key: str, row_ids: Iterable[str | int]) -> RowLookup:
        """Committed output rows for these row ids, whatever batches they were committed in.

        For row-keyed operators (output rows carry their input's ``_rowid``), so a resume whose
        batches are cut differently still pays only for rows never committed.
        """
        self._refresh()
        rows = self._row_index(operator_key)
        wanted = {str(row_id) for row_id in row_ids}
        if not wanted <= rows.keys():
            self._refresh_stored()  # _remember keeps ``rows`` current
        by_batch: dict[str, list[str]] = {}
        for row_id in wanted:
            key = rows.get(row_id)
            if key is not None:
                by_batch.setdefault(key, []).append(row_id)
        tables = [self._rows_of_batch(operator_key, key, hits) for key, hits in by_batch.items()]
        covered = {row_id for hits in by_batch.values() for row_id in hits}
        missing = tuple(sorted(wanted - covered))
        if not tables:
            return RowLookup(table=None, missing=missing)
        return RowLookup(table=pa.concat_tables(tables, promote_options="default"), missing=missing)

    def _rows_of_batch(self, operator_key: str, batch_key: str, row_ids: list[str]) -> pa.Table:
        record = self._committed[(operator_key, batch_key)]
        table = self._table(record)
        if ROW_ID not in table.column_names:
            raise TransactionError(
                f"batch {batch_key} of {operator_key} has no {ROW_ID!r} column; "
                "look it up by batch key with lookup() instead"
            )
        mask = pc.is_in(table[ROW_ID].cast(pa.string()), value_set=pa.array(sorted(row_ids), pa.string()))
        return table.filter(mask)

    def _row_index(self, operator_key: str) -> dict[str, str]:
        # Built on first use per operator (only row-level lookups need it), then kept current.
        if operator_key not in self._rows:
            index: dict[str, str] = {}
            for (operator, key), record in self._committed.items():
                if operator == operator_key:
                    for row_id in record.row_ids:
                        index.setdefault(row_id, key)  # the first batch holding a row, as _remember keeps it
            self._rows[operator_key] = index
        return self._rows[operator_key]

    def _remember(self, record: BatchCommitted, in_store: bool = False) -> None:
        if record.origin is not None:
            self._origins.add(record.origin)
        key = (record.operator_key, record.batch_key)
        if key in self._committed:
            return
        self._committed[key] = record
        if in_store:
            self._in_store.add(key)
        index = self._rows.get(record.operator_key)
        if index is not None:
            for row_id in record.row_ids:
                index.setdefault(row_id, record.batch_key)

    def _refresh(self) -> None:
        if self.away:  # the journal as the driver copied it to the store, and the commit objects
            if self._segment_reader is None:
                self._segment_reader = SegmentReader(self._store, self.run_dir.name)
            for record in self._segment_reader.new_records():
                if isinstance(record, BatchCommitted):
                    self._remember(record, in_store=True)
            self._refresh_stored()
            return
        # Incremental: only the journal's new, complete lines; a line a live writer is
        # still writing waits for the next refresh.
        read = read_journal(self.run_dir / JOURNAL_NAME, offset=self._offset, include_unterminated=False)
        self._offset = read.end_offset
        for record in read.records:
            if isinstance(record, BatchCommitted):
                self._remember(record)

    def _refresh_stored(self) -> None:
        """Read the commit objects not seen yet: workers away from the driver stored them, and the
        driver may not have merged them into the journal yet (one LIST, a GET per new object)."""
        if self.store_uri is None or self.home is None:
            return
        if self._store_reader is None:
            self._store_reader = CommitReader(self._store, self.run_dir.name)
        for record in self._store_reader.new(known=self._origins):
            # An older attempt's object not in the journal yet was stored after a resume merged the
            # store's objects and moved the fence: its merge appends it as refused.
            if record.attempt == self.attempt:
                self._remember(record, in_store=True)

    def _table(self, record: BatchCommitted) -> pa.Table:
        key = (record.operator_key, record.batch_key)
        if record.inline is None and key in self._in_store and not (self.run_dir / record.file).is_file():
            data = self._store.read(self._store.run_path(self.run_dir.name, *Path(record.file).parts))
            return pq.read_table(pa.BufferReader(data))
        return committed_table(self.run_dir, record)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "attempt": self.attempt,
            "inline_bytes": self.inline_bytes,
            "store_uri": self.store_uri,
            "home": self.home,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["run_dir"],
            state["attempt"],
            state.get("inline_bytes", INLINE_BYTES),
            state.get("store_uri"),
            state.get("home"),
        )


def _write_parquet_durably(path: Path, table: pa.Table) -> None:
    make_directory_durably(path.parent)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    pq.write_table(table, temporary)
    fsync_file(temporary)
    os.replace(temporary, path)
    fsync_directory(path.parent)


def encode_inline(table: pa.Table, limit: int = INLINE_BYTES) -> str | None:
    """``table`` as the ``inline`` text of its record (an Arrow IPC stream, base64); None when the
    stream is over ``limit`` bytes (the table goes to a parquet file).

    >>> decode_inline(encode_inline(pa.table({"a": [1, 2]}))).to_pylist()
    [{'a': 1}, {'a': 2}]
    """
    if table.nbytes > limit:  # the stream is no smaller than the buffers: no need to write it
        return None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data = sink.getvalue()
    return base64.b64encode(data.to_pybytes()).decode("ascii") if data.size <= limit else None


def decode_inline(text: str) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(base64.b64decode(text))).read_all()


def committed_table(run_dir: Path, record: BatchCommitted) -> pa.Table:
    """The table a ``batch_committed`` record stores: inline in the record, or in its parquet file."""
    if record.inline is not None:
        return decode_inline(record.inline)
    return pq.read_table(run_dir / record.file)
