"""The planner's long-term memory: what it learnt about a task, recalled by the similarity of tasks.

One LanceDB table, ``memory`` (``tables.memory_schema``), in the catalog folder. A memory is
identified by its task and text (``memory_id`` hashes both, whitespace collapsed), so
remembering the same thing twice merges it into one row: it keeps its first ``created`` and its
``hits``, takes the later expiry (none beats any) and the newer category and source run.
``recall`` embeds the task, returns the ``k`` unexpired memories whose task vectors are nearest
(cosine; the table is small, so the search is exact) and adds one to the ``hits`` of each.

Writers (remember, the hits of recall, forget, expire) hold an ``flock`` on ``memory.lock`` in
the folder, so processes sharing a catalog never race on a Lance commit or merge a duplicate
twice; the kernel drops the lock of a process that dies. Readers see the latest committed
version (the connection re-checks it on every read).

>>> store = MemoryStore.open(folder, embedder.embed)  # doctest: +SKIP
>>> store.remember("count orders by region", "orders.region is NULL for web orders", "dataset")  # doctest: +SKIP
'5d0c...'
>>> [m.memory for m in store.recall("orders per region")]  # doctest: +SKIP
['orders.region is NULL for web orders']
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from semray.catalog.segment_filter import in_list, quote_literal
from semray.catalog.tables import MEMORY, memory_schema
from semray.errors import CatalogError
from semray.log import get_logger
from semray.transactions.durability import acquire_lock, release_lock
from semray.transactions.errors import RunInUseError

log = get_logger(__name__)

LOCK_NAME = "memory.lock"
LOCK_WAIT_S = 30.0
"""How long a writer waits for another process's write (each holds the lock for milliseconds)."""
Embed = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True, slots=True)
class Memory:
    """One remembered fact; ``score`` is the cosine similarity of its task to the recalled one."""

    memory_id: str
    task: str
    memory: str
    category: str
    created: datetime
    expires: datetime | None
    hits: int
    source_run: str | None
    score: float


def memory_id_of(task: str, memory: str) -> str:
    """The id of a memory: a hash of its task and text, whitespace collapsed.

    >>> memory_id_of("a  task", "a memory") == memory_id_of("a task", " a memory")
    True
    """
    canonical = " ".join(task.split()) + "\x1f" + " ".join(memory.split())
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


class MemoryStore:
    """The ``memory`` table of one catalog folder, with the embedder of its task vectors."""

    def __init__(self, folder: Path, embed: Embed, database: Any) -> None:
        self.folder = folder
        self._embed = embed
        self._database = database

    @classmethod
    def open(cls, folder: Path, embed: Embed) -> MemoryStore:
        """Open (or start) the memory of the catalog in ``folder``; the table is created by the first write."""
        import lancedb

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        # A zero interval: every read checks for versions other processes committed.
        return cls(folder, embed, lancedb.connect(str(folder), read_consistency_interval=timedelta(0)))

    def remember(
        self,
        task: str,
        memory: str,
        category: str,
        source_run: str | None = None,
        ttl: timedelta | None = None,
    ) -> str:
        """Store ``memory`` about ``task`` (merged with the same memory of the same task); its id."""
        for name, value in (("task", task), ("memory", memory), ("category", category)):
            if not value.strip():
                raise CatalogError(f"a memory needs a non-empty {name}")
        if ttl is not None and ttl <= timedelta(0):
            raise CatalogError(f"a memory's ttl must be positive, not {ttl}; forget(memory_id) drops one now")
        memory_id = memory_id_of(task, memory)
        vector = self._vectors([task])[0]
        now = datetime.now(UTC)
        expires = None if ttl is None else now + ttl
        with self._locked():
            table = self._table(create_dimension=vector.shape[0])
            old = table.search().where(f"memory_id = {quote_literal(memory_id)}").limit(1).to_list()
            row = {
                "memory_id": memory_id,
                "task": task,
                "task_vector": vector.tolist(),
                "memory": memory,
                "category": category,
                "created": now,
                "expires": expires,
                "hits": 0,
                "source_run": source_run,
            }
            if old:
                previous = old[0]
                row["created"] = previous["created"]
                row["hits"] = previous["hits"]
                row["expires"] = _later(previous["expires"], expires)
                row["source_run"] = source_run if source_run is not None else previous["source_run"]
            batch = pa.Table.from_pylist([row], schema=table.schema)
            table.merge_insert("memory_id").when_matched_update_all().when_not_matched_insert_all().execute(batch)
        log.info("memory_remembered", memory_id=memory_id, category=category, merged=bool(old))
        return memory_id

    def recall(self, task: str, k: int = 5, categories: Sequence[str] | None = None) -> list[Memory]:
        """The ``k`` unexpired memories whose tasks are most like ``task``, best first; each gets one more hit."""
        if k < 1:
            raise CatalogError(f"recall needs k of at least 1, not {k}")
        table = self._table()
        if table is None or (categories is not None and not list(categories)):
            return []
        vector = self._vectors([task])[0]
        where = _unexpired(datetime.now(UTC))
        if categories is not None:
            where = f"({where}) AND ({in_list('category', list(categories))})"
        found = (
            table.search(vector, vector_column_name="task_vector")
            .distance_type("cosine")
            .where(where, prefilter=True)
            .limit(k)
            .to_list()
        )
        if not found:
            return []
        with self._locked():
            ids = [row["memory_id"] for row in found]
            table.update(where=in_list("memory_id", ids), values_sql={"hits": "hits + 1"})
        log.info("memory_recalled", found=len(found), k=k)
        return [_memory(row, hits=row["hits"] + 1) for row in found]

    def forget(self, memory_id: str) -> bool:
        """Drop one memory; False when there was none of that id."""
        with self._locked():
            table = self._table()
            if table is None:
                return False
            deleted = table.delete(f"memory_id = {quote_literal(memory_id)}").num_deleted_rows
        log.info("memory_forgotten", memory_id=memory_id, found=bool(deleted))
        return bool(deleted)

    def expire(self, now: datetime | None = None) -> int:
        """Drop every memory whose expiry is at or before ``now`` (default: the current time); how many."""
        moment = _aware(now or datetime.now(UTC))
        with self._locked():
            table = self._table()
            if table is None:
                return 0
            deleted = int(table.delete(f"NOT ({_unexpired(moment)})").num_deleted_rows)
        log.info("memory_expired", deleted=deleted, now=moment.isoformat())
        return deleted

    def count(self) -> int:
        """How many memories are stored (expired ones included until ``expire`` drops them)."""
        table = self._table()
        return 0 if table is None else int(table.count_rows())

    def _table(self, create_dimension: int | None = None) -> Any:
        """The memory table; None when absent, unless ``create_dimension`` says to create it."""
        try:
            table = self._database.open_table(MEMORY)
        except ValueError:  # LanceDB's "Table 'memory' was not found"
            if create_dimension is None:
                return None
            table = self._database.create_table(MEMORY, schema=memory_schema(create_dimension), exist_ok=True)
        stored = table.schema.field("task_vector").type.list_size
        if create_dimension is not None and stored != create_dimension:
            raise CatalogError(
                f"the memory in {self.folder} holds task vectors of {stored} dimensions, the embedder gives "
                f"{create_dimension}; open it with the embedding model it was written with"
            )
        return table

    def _vectors(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        vectors = np.asarray(self._embed(list(texts)), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts) or vectors.shape[1] == 0:
            raise CatalogError(f"the embedder gave an array of shape {vectors.shape} for {len(texts)} texts")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        if not np.all(np.isfinite(norms)) or np.any(norms == 0):
            raise CatalogError("the embedder gave a zero or non-finite vector; a task needs a direction to be recalled")
        unit: npt.NDArray[np.float32] = vectors / norms
        return unit

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            fd = acquire_lock(self.folder / LOCK_NAME, f"the memory in {self.folder}", LOCK_WAIT_S)
        except RunInUseError as error:
            raise CatalogError(
                f"the memory in {self.folder} stayed locked by another process for {LOCK_WAIT_S:.0f} s; retry"
            ) from error
        try:
            yield
        finally:
            release_lock(fd)


def _unexpired(now: datetime) -> str:
    return f"expires IS NULL OR expires > TIMESTAMP '{_aware(now).isoformat()}'"


def _aware(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive time is taken to be UTC already."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _later(first: datetime | None, second: datetime | None) -> datetime | None:
    if first is None or second is None:
        return None
    return max(first, second)


def _memory(row: dict[str, Any], hits: int) -> Memory:
    return Memory(
        memory_id=row["memory_id"],
        task=row["task"],
        memory=row["memory"],
        category=row["category"],
        created=row["created"],
        expires=row["expires"],
        hits=hits,
        source_run=row["source_run"],
        score=1.0 - float(row["_distance"]),
    )
