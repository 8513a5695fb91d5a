"""The response cache copied to the state store (``Settings.state_uri``), so it outlives the machine.

The cache is a SQLite file on one node (``cache.py``; on a cluster the head node's, ``cluster_cache.py``).
With a state URI its entries also go to the store, as **write-once segments** of new entries, and a
cache that lacks them (a fresh machine, a new cluster, a lost head node) takes them back:

    <state_uri>/cache/segments/<ms since epoch:013d>-<writer>.jsonl.gzip  gzip'd JSON lines, one entry each:
                                                                      {"key", "model", "created", "response"}

* **push** (``CacheCopy.push``): the entries of the file not yet in the store, in one or more segments
  (``SEGMENT_ENTRIES`` each), each put once under a name no other writer uses
  (``StateStore.write_once``). The file remembers, per store, which keys the store holds
  (``store_entries``), so a push sends only what is new since the last one;
* **pull** (``CacheCopy.pull``): one listing of the segments; each one the file has not merged yet
  (``store_segments``) is read and its entries inserted with ``INSERT OR IGNORE``.

Two drivers pushing at once write two segments under two names: nothing is replaced, and a reader
merges both. Entries are content-addressed (the key hashes what was asked), so an entry in two
segments is the same answer and merging is order-free. A push that fails after its put (before it
records what it sent) sends those entries again next time: a duplicate, never a loss. The paid
answers of batches (``batch_answers``) are not copied: they serve a retry within seconds, on one
cluster. Segments are never compacted: a fresh machine reads every segment once (one GET each).

>>> copy = CacheCopy(Path("/tmp/c/responses.sqlite"), open_store("s3://bucket/semray"))  # doctest: +SKIP
>>> copy.push(), copy.pull()  # doctest: +SKIP
(12, 0)
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import pyarrow.fs as pafs

from semray.log import get_logger
from semray.serving.cache import DEFAULT_TIMEOUT_S, RESPONSES_SCHEMA
from semray.transactions.errors import TransactionError
from semray.transactions.remote import StateStore, open_store, uri_for_logs

log = get_logger(__name__)

CACHE_SEGMENTS = ("cache", "segments")
SEGMENT_SUFFIX = ".jsonl.gzip"
"""Not ``.gz``: pyarrow would decompress (and compress) a ``.gz`` object on the fly, on some stores only."""
SEGMENT_ENTRIES = 20_000
"""Entries per segment: a first push of a large cache is several objects, each a bounded read."""

_BOOKKEEPING = (
    "CREATE TABLE IF NOT EXISTS store_entries (store TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (store, key))"
    " WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS store_segments (store TEXT NOT NULL, name TEXT NOT NULL, PRIMARY KEY (store, name))"
    " WITHOUT ROWID",
)
_UNPUSHED = """
SELECT key, model, created, response FROM responses AS r
WHERE r.key > ? AND NOT EXISTS (SELECT 1 FROM store_entries AS s WHERE s.store = ? AND s.key = r.key)
ORDER BY r.key LIMIT ?
"""
"""The next entries the store lacks, in key order from a key on: ``responses`` is keyed (clustered) by
key, so a push reads the cache once whatever its size, one segment's entries in memory at a time."""

Entry = tuple[str, str, float, str]
"""A row of ``responses``: key, model, created, the response as JSON."""


class CacheCopy:
    """One cache file and its copy in one store: ``push`` what the store lacks, ``pull`` what the file lacks.

    Opens its own connection to the file (WAL, as ``ResponseCache``), so it can run next to the
    replicas that use it. Not thread-safe: one push or pull at a time per object.
    """

    def __init__(self, path: Path, store: StateStore, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.path = path.expanduser().resolve()
        self.store = store
        self.store_id = f"{store.fs.type_name}://{store.base}"  # not the URI: its endpoint may differ per machine
        self.folder = "/".join((store.base, *CACHE_SEGMENTS))
        self.writer = os.urandom(6).hex()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._connection = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None)
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute("PRAGMA synchronous=NORMAL")
        self._connection.execute(RESPONSES_SCHEMA)
        for statement in _BOOKKEEPING:
            self._connection.execute(statement)

    def push(self) -> int:
        """Put the entries the store lacks as new segments; returns how many entries were sent."""
        sent, after, part = 0, "", 0
        while chunk := self._connection.execute(_UNPUSHED, (after, self.store_id, SEGMENT_ENTRIES)).fetchall():
            name = f"{int(time.time() * 1000):013d}-{self.writer}{part:04d}{SEGMENT_SUFFIX}"
            self.store.write_once(f"{self.folder}/{name}", _encoded(chunk))
            self._record(name, [row[0] for row in chunk], [])
            sent, after, part = sent + len(chunk), chunk[-1][0], part + 1
        if sent:
            log.info("response_cache_pushed", uri=uri_for_logs(self.store.uri), entries=sent, path=str(self.path))
        return sent

    def pull(self) -> int:
        """Merge the store's segments this file has not merged yet; returns how many entries were new here."""
        infos = self.store.fs.get_file_info(pafs.FileSelector(self.folder, allow_not_found=True))
        listed = sorted(
            info.base_name
            for info in infos
            if info.type == pafs.FileType.File and info.base_name.endswith(SEGMENT_SUFFIX)
        )
        known = {
            name
            for (name,) in self._connection.execute(
                "SELECT name FROM store_segments WHERE store = ?", (self.store_id,)
            ).fetchall()
        }
        added = 0
        for name in (name for name in listed if name not in known):
            try:
                rows = _decoded(self.store.read(f"{self.folder}/{name}"))
            except (OSError, ValueError, KeyError, TypeError) as error:  # written whole, so damaged: tried next pull
                log.warning("response_cache_segment_unreadable", uri=self.folder, name=name, error=str(error)[:200])
                continue
            added += self._record(name, [row[0] for row in rows], rows)
        if added:
            log.info("response_cache_pulled", uri=uri_for_logs(self.store.uri), entries=added, path=str(self.path))
        return added

    def _record(self, segment: str, keys: Sequence[str], rows: Sequence[Entry]) -> int:
        """In one transaction: insert ``rows`` (first write of a key wins), note ``keys`` as held by the
        store and ``segment`` as merged. Returns the rows that were new in the file."""
        connection = self._connection
        connection.execute("BEGIN IMMEDIATE")
        try:
            before = connection.total_changes
            connection.executemany("INSERT OR IGNORE INTO responses VALUES (?, ?, ?, ?)", rows)
            added = connection.total_changes - before
            connection.executemany(
                "INSERT OR IGNORE INTO store_entries VALUES (?, ?)", [(self.store_id, key) for key in keys]
            )
            connection.execute("INSERT OR IGNORE INTO store_segments VALUES (?, ?)", (self.store_id, segment))
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        return added

    def close(self) -> None:
        self._connection.close()


def _encoded(rows: Sequence[Entry]) -> bytes:
    lines = (
        json.dumps({"key": key, "model": model, "created": created, "response": response}, separators=(",", ":"))
        for key, model, created, response in rows
    )
    return gzip.compress("\n".join(lines).encode("utf-8") + b"\n", compresslevel=6)


def _decoded(data: bytes) -> list[Entry]:
    rows: list[Entry] = []
    for line in gzip.decompress(data).splitlines():
        if line.strip():
            fields = json.loads(line)
            rows.append((str(fields["key"]), str(fields["model"]), float(fields["created"]), str(fields["response"])))
    return rows


Direction = Literal["pull", "push"]


def copy_with_store(path: Path, uri: str, direction: Direction, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> int:
    """``pull`` or ``push`` the cache file at ``path`` with the store at ``uri``; entries moved, 0 on a
    failure (logged as ``response_cache_store_failed``: the cache and the run go on without the copy)."""
    try:
        copy = CacheCopy(path, open_store(uri), timeout_s=timeout_s)
        try:
            return copy.pull() if direction == "pull" else copy.push()
        finally:
            copy.close()
    except (OSError, sqlite3.Error, TransactionError, ValueError) as error:
        log.warning(
            "response_cache_store_failed",
            direction=direction,
            path=str(path),
            uri=uri_for_logs(uri),
            error=f"{type(error).__name__}: {error}"[:300],
        )
        return 0


class CachePusher:
    """Pushes a run's new cache entries every ``interval_s`` from a thread, and once more on ``close``."""

    def __init__(self, push: Callable[[], int], interval_s: float) -> None:
        self.push = push
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="semray-cache-push", daemon=True)

    def start(self) -> CachePusher:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.push()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.push()


__all__ = ["CACHE_SEGMENTS", "CacheCopy", "CachePusher", "Direction", "copy_with_store"]
