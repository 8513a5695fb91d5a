"""A durable, content-addressed response cache shared by every process on the machine.

Store: one SQLite file in WAL mode (``<state>/cache/responses.sqlite``). Why SQLite and not
LanceDB: the cache is point lookups and small inserts by key from many replicas and runs at
once. SQLite gives transactional ``INSERT OR IGNORE`` across processes (file locks), WAL lets
readers proceed while one writer commits, and a lookup is a B-tree probe; LanceDB is built for
columnar scans and vectors, appends a fragment and a manifest version per write, and resolves
concurrent writers by optimistic commit retries, which is the wrong shape for this traffic.

Keys hash (model identity, rendered messages, decoding parameters, constraint, prompt-template
version), so any change to what is asked misses; the model identity (``tier.tier_identity``)
covers the backend kind, model, base URL or weights fingerprint, and the simulator's tables and
seed. Values are the parsed ``ModelResponse`` as JSON; a hit is returned with ``cache_hit=True``
and zero usage. A cache that cannot be used degrades to misses, logged once, never a failure.

A second table, ``batch_answers``, records which answers the model was paid for under each
batch id (the id ``TierHandles`` gives a batch and sends with every attempt), in the same
transaction as the answers are cached: when a replica dies after answering, the retry of that
batch reads them back as *paid* (``batch_answers``) instead of calling the model again or
counting them as free hits. Rows older than ``BATCH_ANSWERS_KEPT_S`` are dropped by a cache's
first recording write.

>>> cache = ResponseCache(Path("/tmp/c/responses.sqlite"))  # doctest: +SKIP
>>> cache.get_many(["k"])  # doctest: +SKIP
{}
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from semray.log import get_logger
from semray.serving.contract import ModelResponse

log = get_logger(__name__)

RESPONSES_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    created REAL NOT NULL,
    response TEXT NOT NULL
) WITHOUT ROWID
"""
_BATCH_SCHEMA = """
CREATE TABLE IF NOT EXISTS batch_answers (
    batch TEXT NOT NULL,
    key TEXT NOT NULL,
    created REAL NOT NULL,
    response TEXT NOT NULL,
    PRIMARY KEY (batch, key)
) WITHOUT ROWID
"""
BATCH_ANSWERS_KEPT_S = 24 * 3600.0
"""How long a batch's paid answers are kept for a retry of that batch (retries come within seconds)."""
DEFAULT_TIMEOUT_S = 10.0
"""Seconds a writer waits for another process's write lock before the cache turns itself off."""
_CHUNK = 500  # SQLite's default limit on bound parameters is far above this


def cache_key(model_identity: str, payload: Mapping[str, Any]) -> str:
    """A stable content address: SHA-256 of canonical JSON of the model and what is asked.

    >>> cache_key("simulated:sim-small", {"messages": [["user", "hi"]]})[:12]
    'd9d1716463ee'
    """
    blob = json.dumps([model_identity, payload], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class AnswerCache(Protocol):
    """What a tier asks of a response cache: ``ResponseCache`` (a file on this node) or, on a
    cluster, ``cluster_cache.ClusterResponseCache`` (the head node's file, through an actor)."""

    def get_many(self, keys: Sequence[str]) -> dict[str, ModelResponse]: ...

    def batch_answers(self, batch: str, keys: Sequence[str]) -> dict[str, ModelResponse]: ...

    def look_up(
        self, batch: str | None, keys: Sequence[str]
    ) -> tuple[dict[str, ModelResponse], dict[str, ModelResponse]]: ...

    def put_many(self, items: Iterable[tuple[str, ModelResponse]], *, batch: str | None = None) -> int: ...

    def close(self) -> None: ...


class ResponseCache:
    """Responses by content address in a WAL-mode SQLite file; safe under concurrent writers.

    Each thread gets its own connection (SQLite connections are not shared across threads);
    writers wait up to ``timeout_s`` for the write lock, and a key written twice keeps the first
    value. A cache that cannot be opened, read or written (a corrupt or locked file, a read-only
    file, a folder in its place) never fails a batch: the first failure is logged once as a
    ``response_cache_unavailable`` warning with the path and the cause, and from then on every
    lookup is a miss and every write is skipped (``failure`` says why).
    """

    def __init__(self, path: Path, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.path = path.expanduser().resolve()
        self.timeout_s = timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._failure: str | None = None
        self._bad_entry_logged = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._connection().execute(RESPONSES_SCHEMA)
        except (OSError, sqlite3.Error) as error:
            self._degrade("open", error)
        self._batches = self._failure is None and self._open_batch_table()
        self._pruned = False

    def _open_batch_table(self) -> bool:
        """Create ``batch_answers`` if needed; False (batches unrecorded, answers still read) when
        the file cannot take it, e.g. a read-only cache written by an older semray."""
        try:
            self._connection().execute(_BATCH_SCHEMA)
        except sqlite3.Error as error:
            log.debug("response_cache_batches_off", path=str(self.path), error=f"{type(error).__name__}: {error}")
            return False
        return True

    @property
    def failure(self) -> str | None:
        """Why the cache is off in this process (None while it works)."""
        return self._failure

    @property
    def available(self) -> bool:
        return self._failure is None

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
            self._local.connection = connection
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
        return connection

    def _degrade(self, operation: str, error: BaseException) -> None:
        """Turn the cache off for this process, logging the cause once."""
        with self._lock:
            first = self._failure is None
            if first:
                self._failure = f"{operation} failed: {type(error).__name__}: {error}"
        if first:
            log.warning(
                "response_cache_unavailable",
                path=str(self.path),
                operation=operation,
                error=f"{type(error).__name__}: {error}",
                hint=f"answers are neither cached nor reused in this process; fix or delete {self.path}",
            )
        self.close()

    def get_many(self, keys: Sequence[str]) -> dict[str, ModelResponse]:
        """Cached responses for the keys present (missing keys are absent from the result)."""
        return self._select("SELECT key, response FROM responses WHERE key IN ({marks})", (), keys)

    def look_up(
        self, batch: str | None, keys: Sequence[str]
    ) -> tuple[dict[str, ModelResponse], dict[str, ModelResponse]]:
        """What a tier reads before calling the model: the answers an earlier attempt of ``batch`` paid
        for (``batch_answers``), and the cached answers of the other keys (``get_many``)."""
        paid = self.batch_answers(batch, keys) if batch is not None else {}
        return paid, self.get_many([key for key in keys if key not in paid])

    def batch_answers(self, batch: str, keys: Sequence[str]) -> dict[str, ModelResponse]:
        """The answers an earlier attempt of ``batch`` was paid for (``put_many(..., batch=)``),
        as it answered them, usage included; missing keys are absent from the result."""
        if not self._batches:
            return {}
        return self._select(
            "SELECT key, response FROM batch_answers WHERE batch = ? AND key IN ({marks})", (batch,), keys
        )

    def _select(self, query: str, leading: tuple[str, ...], keys: Sequence[str]) -> dict[str, ModelResponse]:
        found: dict[str, ModelResponse] = {}
        if self._failure is not None or not keys:
            return found
        try:
            connection = self._connection()
            for start in range(0, len(keys), _CHUNK):
                chunk = list(keys[start : start + _CHUNK])
                marks = ",".join("?" * len(chunk))
                rows = connection.execute(query.format(marks=marks), [*leading, *chunk])
                for key, blob in rows.fetchall():
                    response = self._decoded(key, blob)
                    if response is not None:
                        found[key] = response
        except (OSError, sqlite3.Error) as error:
            # A cache that cannot be read is a miss, never a failed batch.
            self._degrade("read", error)
            return {}
        return found

    def _decoded(self, key: str, blob: object) -> ModelResponse | None:
        """A stored response, or None (a miss) for an entry that no longer validates."""
        try:
            return ModelResponse.model_validate_json(blob if isinstance(blob, str | bytes) else str(blob))
        except ValueError as error:
            if not self._bad_entry_logged:
                self._bad_entry_logged = True
                log.warning("response_cache_entry_unreadable", path=str(self.path), key=key, error=str(error)[:200])
            return None

    def put_many(self, items: Iterable[tuple[str, ModelResponse]], *, batch: str | None = None) -> int:
        """Store the responses without an error (first write of a key wins); returns how many were new.

        With ``batch``, ``items`` are the answers the model was paid for in one attempt of that
        batch: all of them, errors too, are also recorded under the batch (``batch_answers``), in
        the same transaction.
        """
        now = time.time()
        answers = [(key, response, response.model_dump_json()) for key, response in items]
        rows = [(key, r.model, now, blob) for key, r, blob in answers if r.error is None]
        paid = [(batch, key, now, blob) for key, _, blob in answers] if batch is not None and self._batches else []
        if not answers or self._failure is not None:
            return 0
        connection: sqlite3.Connection | None = None
        try:
            connection = self._connection()
            connection.execute("BEGIN IMMEDIATE")
            before = connection.total_changes
            connection.executemany("INSERT OR IGNORE INTO responses VALUES (?, ?, ?, ?)", rows)
            added = connection.total_changes - before
            if paid:
                connection.executemany("INSERT OR IGNORE INTO batch_answers VALUES (?, ?, ?, ?)", paid)
                if not self._pruned:  # once per cache object: retries come within seconds
                    connection.execute("DELETE FROM batch_answers WHERE created < ?", (now - BATCH_ANSWERS_KEPT_S,))
            connection.execute("COMMIT")
            self._pruned = self._pruned or bool(paid)
        except (OSError, sqlite3.Error) as error:
            if connection is not None and connection.in_transaction:
                try:
                    connection.execute("ROLLBACK")
                except sqlite3.Error as rollback_error:
                    # The connection is closed by _degrade just below either way.
                    log.debug("response_cache_rollback_failed", path=str(self.path), error=str(rollback_error))
            self._degrade("write", error)
            return 0
        return added

    def __len__(self) -> int:
        if self._failure is not None:
            return 0
        try:
            (count,) = self._connection().execute("SELECT COUNT(*) FROM responses").fetchone()
        except (OSError, sqlite3.Error) as error:
            self._degrade("read", error)
            return 0
        return int(count)

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            self._local.connection = None
            try:
                connection.close()
            except sqlite3.Error:
                log.debug("response_cache_close_failed", path=str(self.path))

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "timeout_s": self.timeout_s, "batches": self._batches}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self.timeout_s = state.get("timeout_s", DEFAULT_TIMEOUT_S)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._failure = None
        self._bad_entry_logged = False
        self._batches = state.get("batches", False)
        self._pruned = False
