"""A durable, content-addressed response cache shared by every process on the machine.

Store: one SQLite file in WAL mode (``<state>/cache/responses.sqlite``). Why SQLite and not
LanceDB: the cache is point lookups and small inserts by key from many replicas and runs at
once. SQLite gives transactional ``INSERT OR IGNORE`` across processes (file locks), WAL lets
readers proceed while one writer commits, and a lookup is a B-tree probe; LanceDB is built for
columnar scans and vectors, appends a fragment and a manifest version per write, and resolves
concurrent writers by optimistic commit retries, which is the wrong shape for this traffic.

Keys hash (model identity, rendered messages, decoding parameters, constraint, prompt-template
version), so any change to what is asked misses. Values are the parsed ``ModelResponse`` as
JSON; a hit is returned with ``cache_hit=True`` and zero usage.

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
from typing import Any

from semray.errors import SemrayError
from semray.log import get_logger
from semray.serving.contract import ModelResponse

log = get_logger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    created REAL NOT NULL,
    response TEXT NOT NULL
) WITHOUT ROWID
"""
_BUSY_TIMEOUT_S = 60.0
_CHUNK = 500  # SQLite's default limit on bound parameters is far above this


class CacheError(SemrayError):
    """The response cache file cannot be opened or written."""


def cache_key(model_identity: str, payload: Mapping[str, Any]) -> str:
    """A stable content address: SHA-256 of canonical JSON of the model and what is asked.

    >>> cache_key("simulated:sim-small", {"messages": [["user", "hi"]]})[:12]
    'd9d1716463ee'
    """
    blob = json.dumps([model_identity, payload], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """Responses by content address in a WAL-mode SQLite file; safe under concurrent writers.

    Each thread gets its own connection (SQLite connections are not shared across threads);
    writers wait up to a minute for the write lock, and a key written twice keeps the first value.
    """

    def __init__(self, path: Path) -> None:
        self.path = path.expanduser().resolve()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CacheError(f"cannot create the response cache folder {self.path.parent}: {error}") from error
        self._local = threading.local()
        with self._connection() as connection:
            connection.execute(_SCHEMA)

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            try:
                connection = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as error:
                raise CacheError(f"cannot open the response cache {self.path}: {error}") from error
            self._local.connection = connection
        return connection

    def get_many(self, keys: Sequence[str]) -> dict[str, ModelResponse]:
        """Cached responses for the keys present (missing keys are absent from the result)."""
        found: dict[str, ModelResponse] = {}
        connection = self._connection()
        for start in range(0, len(keys), _CHUNK):
            chunk = list(keys[start : start + _CHUNK])
            marks = ",".join("?" * len(chunk))
            try:
                rows = connection.execute(f"SELECT key, response FROM responses WHERE key IN ({marks})", chunk)
                for key, blob in rows.fetchall():
                    found[key] = ModelResponse.model_validate_json(blob)
            except sqlite3.Error as error:
                # A cache that cannot be read is a miss, never a failed batch.
                log.warning("response_cache_read_failed", path=str(self.path), error=str(error))
        return found

    def put_many(self, items: Iterable[tuple[str, ModelResponse]]) -> int:
        """Store responses (first write of a key wins); returns how many were new."""
        rows = [(key, response.model, time.time(), response.model_dump_json()) for key, response in items]
        if not rows:
            return 0
        connection = self._connection()
        try:
            connection.execute("BEGIN IMMEDIATE")
            before = connection.total_changes
            connection.executemany("INSERT OR IGNORE INTO responses VALUES (?, ?, ?, ?)", rows)
            added = connection.total_changes - before
            connection.execute("COMMIT")
        except sqlite3.Error as error:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            log.warning("response_cache_write_failed", path=str(self.path), error=str(error), rows=len(rows))
            return 0
        return added

    def __len__(self) -> int:
        (count,) = self._connection().execute("SELECT COUNT(*) FROM responses").fetchone()
        return int(count)

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._local = threading.local()
