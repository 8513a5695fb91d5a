"""Run journals mirrored to an object store through pyarrow's filesystems (``Settings.state_uri``).

The journal's guarantees need POSIX (``flock``, appends, fsync'd renames), which ``s3://``,
``gs://`` or ``abfs://`` do not give. So a run keeps working in its local staging folder
(``Settings.state_dir``, unchanged) and its single writer, the driver, copies what the journal
committed there to the store as **immutable objects**, each written once under a name no one
else writes:

    <state_uri>/runs/<run_id>/segments/<seq:010d>-<writer>.jsonl   bytes [a, b) of the local journal,
                                                                 complete lines only; seq 1, 2, 3...
    <state_uri>/runs/<run_id>/batches/...                          a batch's parquet table, copied
                                                                 before the segment naming it
    <state_uri>/runs/<run_id>/lease.json                           the writer, renewed each interval
    <state_uri>/runs/<run_id>/CANCEL                               a stop asked from another machine

The store's journal is the concatenation of the segments in ``seq`` order: always a prefix of the
local one, so a segment is the commit point there as the record is locally. ``semray runs ls``,
``show`` and resume read it from any machine; a resume copies it back into a local staging folder.

**One writer per run**, as far as an object store allows. Locally the driver lock (``flock``)
still holds. Across machines: a writer renews ``lease.json`` (its id, host, an expiry); a resume
refuses a run whose lease is live and not its own; and before each segment the writer lists the
segments and stops (``StoreWriterConflictError``) when any is not its own expected predecessor.
Segments and batch files are put write-once (``StateStore.write_once``: S3's ``If-None-Match``,
a hard link on ``file://``; a check before the put elsewhere), so no object is ever replaced. That
does not make the segment check atomic (there is no lock): two writers that both pass their check
within one sync interval each write a segment ``n`` under its own name, and readers refuse the run
(``TransactionError``: two writers, one ``seq``). Leases compare wall clocks: skewed clocks shorten
or lengthen them.

>>> store = StateStore.from_uri("s3://bucket/semray")  # doctest: +SKIP
>>> [run_id for run_id in store.run_ids()]  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from semray.log import get_logger
from semray.transactions.durability import make_directory_durably, write_bytes_atomically
from semray.transactions.errors import ObjectExistsError, RunInUseError, StoreWriterConflictError, TransactionError
from semray.transactions.journal import JOURNAL_NAME, parse_journal_bytes
from semray.transactions.keys import is_run_id
from semray.transactions.records import RECORD_ADAPTER, BatchCommitted, JournalRecord
from semray.transactions.write_once import put_once

log = get_logger(__name__)

SEGMENTS = "segments"
LEASE_NAME = "lease.json"
REMOTE_CANCEL = "CANCEL"
"""The stop object in the store; the mirror copies it to the local run folder under the same name
(``registry.CANCEL_MARKER``, not imported: the registry imports this module)."""

OBJECT_STORES = frozenset({"s3", "gcs"})
"""pyarrow filesystems (``type_name``) whose folders are key prefixes: a put needs no folder first, and
``create_dir`` would put an empty marker object per folder level on every write (seen on S3; Azure's,
whose hierarchical namespace has real folders, keeps ``create_dir``)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One object of a run's journal in the store: its place, writer and size."""

    seq: int
    writer: str
    path: str
    size: int


@dataclass(frozen=True, slots=True)
class Lease:
    """Who writes a run now: ``live`` while ``expires_at`` (epoch seconds) is ahead of this machine's clock."""

    writer: str
    host: str
    pid: int
    expires_at: float

    @property
    def live(self) -> bool:
        return self.expires_at > time.time()


@dataclass(frozen=True, slots=True)
class StateStore:
    """A folder in a pyarrow filesystem holding runs' journals, e.g. ``StateStore.from_uri("gs://b/semray")``."""

    fs: pafs.FileSystem
    base: str
    uri: str

    @classmethod
    def from_uri(cls, uri: str) -> StateStore:
        """Resolve ``uri`` with pyarrow (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``, ``file://``), else
        fsspec when it knows the scheme (``memory://``), wrapped as a pyarrow filesystem."""
        try:
            fs, base = pafs.FileSystem.from_uri(uri)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as error:
            fs, base = _fsspec_filesystem(uri, error)
        return cls(fs=fs, base=base.rstrip("/"), uri=uri)

    def run_path(self, run_id: str, *parts: str) -> str:
        return "/".join((self.base, "runs", run_id, *parts))

    def run_ids(self) -> list[str]:
        """Ids of the runs in the store, newest first."""
        infos = self.fs.get_file_info(pafs.FileSelector(f"{self.base}/runs", allow_not_found=True))
        names = (info.base_name for info in infos if info.type == pafs.FileType.Directory)
        return sorted((name for name in names if is_run_id(name)), reverse=True)

    def segments(self, run_id: str) -> list[Segment]:
        """The run's journal objects in order; ``TransactionError`` when two writers wrote one place in it."""
        folder = self.run_path(run_id, SEGMENTS)
        infos = self.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        found: list[Segment] = []
        for info in infos:
            stem, dot, suffix = info.base_name.partition(".")
            seq, dash, writer = stem.partition("-")
            if info.type == pafs.FileType.File and dot and suffix == "jsonl" and dash and seq.isdigit():
                found.append(Segment(seq=int(seq), writer=writer, path=info.path, size=info.size or 0))
        found.sort(key=lambda segment: (segment.seq, segment.writer))
        for place, segment in enumerate(found, start=1):
            if segment.seq != place:
                twice = segment.seq < place
                raise TransactionError(
                    f"run {run_id} in {self.uri}: "
                    + (
                        f"two writers wrote segment {segment.seq} of its journal ({folder}); the run has two "
                        "histories. Keep the one to go on with (delete the other's segments) before resuming it"
                        if twice
                        else f"segment {place} of its journal is missing ({folder}); the run cannot be read"
                    )
                )
        return found

    def journal_bytes(self, run_id: str) -> tuple[bytes, list[Segment]]:
        """The run's journal as the store holds it, and the segments it was read from."""
        segments = self.segments(run_id)
        return b"".join(self.read(segment.path) for segment in segments), segments

    def records(self, run_id: str) -> tuple[tuple[JournalRecord, ...], int]:
        """The run's journal records from the store, and the lines skipped."""
        data, _ = self.journal_bytes(run_id)
        records, skipped, _end = parse_journal_bytes(data, RECORD_ADAPTER, self.run_path(run_id, SEGMENTS))
        return records, len(skipped)

    def read(self, path: str) -> bytes:
        with self.fs.open_input_stream(path) as stream:
            return bytes(stream.read())

    def read_if_exists(self, path: str) -> bytes | None:
        if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        try:
            return self.read(path)
        except FileNotFoundError:
            return None

    def write(self, path: str, data: bytes) -> None:
        """Write one whole object (an object store's put: visible whole or not at all)."""
        if self.fs.type_name not in OBJECT_STORES:  # a bucket's folders are implicit; create_dir would put markers
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with self.fs.open_output_stream(path) as stream:
            stream.write(data)

    def write_once(self, path: str, data: bytes) -> None:
        """Write one whole object that must not exist yet: ``ObjectExistsError`` when it does, the stored one
        unchanged. Enforced atomically on ``file://`` (a hard link) and ``s3://`` (a conditional put, with
        boto3); a check before the put elsewhere (``semray.transactions.write_once``)."""
        put_once(self, path, data)

    def exists(self, path: str) -> bool:
        return bool(self.fs.get_file_info(path).type != pafs.FileType.NotFound)

    def lease(self, run_id: str) -> Lease | None:
        data = self.read_if_exists(self.run_path(run_id, LEASE_NAME))
        if data is None:
            return None
        try:
            fields = json.loads(data)
            return Lease(str(fields["writer"]), str(fields["host"]), int(fields["pid"]), float(fields["expires_at"]))
        except (ValueError, KeyError, TypeError):
            log.warning("run_lease_unreadable", run_id=run_id, uri=self.uri)
            return None

    def cancel_requested(self, run_id: str) -> str | None:
        """The reason of a stop asked through the store (``request_remote_stop``), None when none was."""
        data = self.read_if_exists(self.run_path(run_id, REMOTE_CANCEL))
        return None if data is None else data.decode("utf-8", errors="replace").strip()

    def clear_remote_stop(self, run_id: str) -> None:
        """Forget a stop asked through the store (a resume begins a new attempt, as it removes the local marker)."""
        path = self.run_path(run_id, REMOTE_CANCEL)
        if self.exists(path):
            self.fs.delete_file(path)

    def request_remote_stop(self, run_id: str, reason: str) -> None:
        """Ask the run's live writer, on whatever machine, to stop between batches (it polls each interval)."""
        self.write(self.run_path(run_id, REMOTE_CANCEL), reason.encode("utf-8") + b"\n")


@functools.lru_cache(maxsize=8)
def open_store(uri: str) -> StateStore:
    """The store of ``Settings.state_uri``, opened once per process."""
    return StateStore.from_uri(uri)


def uri_for_logs(uri: str) -> str:
    """A store URI without its query (endpoint options, which may differ per machine), as log lines show it.

    >>> uri_for_logs("s3://bucket/semray?endpoint_override=127.0.0.1%3A9000")
    's3://bucket/semray'
    """
    return uri.split("?", 1)[0]


def _fsspec_filesystem(uri: str, error: Exception) -> tuple[pafs.FileSystem, str]:
    try:
        import fsspec
        from fsspec.core import split_protocol
    except ImportError:
        raise TransactionError(f"state URI {uri!r}: pyarrow cannot open it ({error})") from None
    protocol, path = split_protocol(uri)
    try:
        filesystem = fsspec.filesystem(protocol)
    except (ValueError, ImportError) as fsspec_error:
        raise TransactionError(
            f"state URI {uri!r}: neither pyarrow ({error}) nor fsspec ({fsspec_error}) can open it"
        ) from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem)), path or "/"


class RunMirror:
    """Copies one run's newly committed journal lines (and the batch files they name) to the store.

    The run's driver holds one: it pushes after its own records and every ``interval_s`` from a
    thread (the actors' commits land in the local journal meanwhile), and once more on close.
    """

    def __init__(
        self,
        store: StateStore,
        run_dir: Path,
        writer: str,
        interval_s: float,
        merge: Callable[[], object] | None = None,
    ) -> None:
        """``merge``: called before each push, to append what workers on other nodes stored
        (``remote_commits.CommitMerger.merge``) to the local journal first."""
        self.store = store
        self.merge = merge
        self.run_dir = run_dir
        self.run_id = run_dir.name
        self.writer = writer
        self.interval_s = interval_s
        data, segments = store.journal_bytes(self.run_id)
        local = (run_dir / JOURNAL_NAME).read_bytes()
        if not local.startswith(data):
            raise TransactionError(
                f"run {self.run_id}: the journal in {store.uri} is not a prefix of the local one in {run_dir}; "
                "another machine wrote the run since this copy was taken. Resume it from the store (remove the "
                "local folder) or keep this copy under another state URI"
            )
        self._pushed = len(data)
        self._next_seq = len(segments) + 1
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fenced = False

    @classmethod
    def attach(
        cls,
        store: StateStore,
        run_dir: Path,
        attempt: int,
        interval_s: float,
        merge: Callable[[], object] | None = None,
    ) -> RunMirror:
        """A mirror of a fresh writer id; it takes the run's lease and pushes what the store lacks."""
        mirror = cls(store, run_dir, f"a{attempt}{os.urandom(4).hex()}", interval_s, merge)
        mirror.push()
        return mirror

    def push(self) -> int:
        """Copy the local journal's complete lines not yet in the store as one segment; renew the lease.

        Returns the bytes copied. Raises ``StoreWriterConflictError`` (and stops pushing) when another
        writer added a segment since this one's last.
        """
        with self._lock:
            if self.fenced:
                message = f"run {self.run_id}: another writer took over its journal in {self.store.uri}"
                raise StoreWriterConflictError(message)
            if self.merge is not None:
                self.merge()
            with (self.run_dir / JOURNAL_NAME).open("rb") as handle:
                handle.seek(self._pushed)
                data = handle.read()
            chunk = data[: data.rfind(b"\n") + 1]
            if chunk:
                records, _skipped, _end = parse_journal_bytes(chunk, RECORD_ADAPTER, str(self.run_dir), self._pushed)
                self._copy_batch_files(records)
                self._check_sole_writer()
                name = f"{self._next_seq:010d}-{self.writer}.jsonl"
                self._put_segment(self.store.run_path(self.run_id, SEGMENTS, name), chunk)
                self._pushed += len(chunk)
                self._next_seq += 1
            self._renew_lease(self.interval_s * 3)
            return len(chunk)

    def merge_now(self) -> None:
        """Merge what workers on other nodes stored into the local journal now, without a push (one LIST
        when nothing is new): the driver's budget check calls it before each decision."""
        with self._lock:
            if self.merge is not None and not self.fenced:
                self.merge()

    def start(self) -> None:
        """Push every ``interval_s`` from a daemon thread until ``close``."""
        self._thread = threading.Thread(target=self._loop, name=f"semray-mirror-{self.run_id}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the thread, push what is left, and release the lease; failures are logged (the local copy keeps all)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            self.push()
            with self._lock:
                self._renew_lease(-1.0)  # expired: the run has no live writer
        except (OSError, TransactionError) as error:
            log.error("run_mirror_failed", run_id=self.run_id, uri=self.store.uri, error=str(error))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.push()
                reason = self.store.cancel_requested(self.run_id)
                local = self.run_dir / REMOTE_CANCEL
                if reason is not None and not local.exists():
                    write_bytes_atomically(local, reason.encode("utf-8") + b"\n")
                elif reason is None and local.exists():  # a stop asked here reaches the workers on other nodes
                    self.store.request_remote_stop(self.run_id, local.read_text("utf-8", errors="replace").strip())
            except StoreWriterConflictError as error:
                log.error("run_mirror_fenced", run_id=self.run_id, uri=self.store.uri, error=str(error))
                return
            except (OSError, TransactionError) as error:
                # The local staging folder keeps everything; the next push copies it.
                log.warning("run_mirror_push_failed", run_id=self.run_id, uri=self.store.uri, error=str(error))

    def _copy_batch_files(self, records: Iterable[JournalRecord]) -> None:
        for record in records:
            if isinstance(record, BatchCommitted) and record.file:
                target = self.store.run_path(self.run_id, *Path(record.file).parts)
                if not self.store.exists(target):  # names are unique per commit: a present one is this file
                    with contextlib.suppress(ObjectExistsError):  # put since the check: this file too
                        self.store.write_once(target, (self.run_dir / record.file).read_bytes())

    def _put_segment(self, path: str, chunk: bytes) -> None:
        try:
            self.store.write_once(path, chunk)
        except ObjectExistsError as error:
            if self.store.read(path) != chunk:  # not an earlier try of this very put (a lost reply)
                self.fenced = True
                raise StoreWriterConflictError(f"run {self.run_id}: {error}; this writer stops") from error

    def _check_sole_writer(self) -> None:
        try:
            segments = self.store.segments(self.run_id)
        except TransactionError as error:  # two histories, or a gap: not this writer's journal any more
            self.fenced = True
            raise StoreWriterConflictError(str(error)) from error
        expected = self._next_seq - 1
        if len(segments) != expected:
            self.fenced = True
            other = segments[-1].writer if segments else "?"
            raise StoreWriterConflictError(
                f"run {self.run_id}: writer {other} added to its journal in {self.store.uri} (it holds "
                f"{len(segments)} segments, this writer expected {expected}); this writer stops"
            )

    def _renew_lease(self, ttl_s: float) -> None:
        host, pid = socket.gethostname(), os.getpid()
        lease = {"writer": self.writer, "host": host, "pid": pid, "expires_at": time.time() + ttl_s}
        self.store.write(self.store.run_path(self.run_id, LEASE_NAME), json.dumps(lease).encode())


def pull_run(store: StateStore, runs_root: Path, run_id: str) -> Path:
    """Make the local staging folder of ``run_id`` hold at least the store's journal; returns the folder.

    A local journal that extends the store's (this machine's writer died before its last push) is
    kept as it is: its extra lines are committed work the next push copies. One the store's
    extends is replaced, and the batch files its records name are fetched. ``RunInUseError`` when
    the run's lease is live; ``TransactionError`` when the two have diverged.
    """
    lease = store.lease(run_id)
    if lease is not None and lease.live:
        raise RunInUseError(
            f"run {run_id} is being written by {lease.writer} on {lease.host} (pid {lease.pid}), its lease in "
            f"{store.uri} live for {lease.expires_at - time.time():.0f} s more; wait for it or cancel it"
        )
    data, segments = store.journal_bytes(run_id)
    folder = runs_root / run_id
    journal = folder / JOURNAL_NAME
    local = journal.read_bytes() if journal.is_file() else b""
    if not segments or local.startswith(data):
        return folder
    if not data.startswith(local):
        raise TransactionError(
            f"run {run_id}: its local journal in {folder} and the one in {store.uri} have diverged (each has records "
            "the other lacks); move the local folder away to resume from the store"
        )
    make_directory_durably(folder)
    records, _skipped, _end = parse_journal_bytes(data, RECORD_ADAPTER, store.run_path(run_id, SEGMENTS))
    for record in records:
        if isinstance(record, BatchCommitted) and record.file and not (folder / record.file).is_file():
            make_directory_durably((folder / record.file).parent)
            write_bytes_atomically(folder / record.file, store.read(store.run_path(run_id, *Path(record.file).parts)))
    write_bytes_atomically(journal, data)
    log.info("run_pulled", run_id=run_id, uri=store.uri, segments=len(segments), bytes=len(data))
    return folder
