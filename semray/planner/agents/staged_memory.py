"""Memory writes staged behind a unit's commit: a failed attempt's writes never reach the store.

``StagedMemory`` is a ``MemoryView`` over another one. Reads see that store plus the writes staged
so far; writes wait until ``apply`` (the unit commits) or are dropped by ``discard`` (the attempt
failed). A sub-agent's units stage over their parent's ``StagedMemory``: what a sub-agent commits
reaches long-term memory only once the parent's unit commits too. Writes from sub-agents running
in threads at once are serialised by a lock.

>>> staged = StagedMemory(ListMemory())  # doctest: +SKIP
>>> staged.remember("q", "a lesson", "knowledge").memory_id  # doctest: +SKIP
'staged-0'
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from semray.planner.agents.catalog_view import MemoryRecord, MemoryView


@dataclass(slots=True)
class StagedMemory:
    """A ``MemoryView`` whose writes wait for the unit's commit; a failed attempt's writes are dropped.

    Reads see the store as committed plus this attempt's own staged writes.
    """

    store: MemoryView
    _remembered: list[MemoryRecord] = field(default_factory=list)
    _forgotten: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def recall(self, task: str, limit: int = 5, category: str | None = None) -> Sequence[MemoryRecord]:
        found = [
            record for record in self.store.recall(task, limit, category) if record.memory_id not in self._forgotten
        ]
        with self._lock:
            staged = [record for record in self._remembered if category is None or record.category == category]
        return [*found, *staged][:limit]

    def remember(
        self, task: str, memory: str, category: str, expires: datetime | None = None, source_run: str | None = None
    ) -> MemoryRecord:
        with self._lock:
            record = MemoryRecord(
                f"staged-{len(self._remembered)}",
                task,
                memory,
                category,
                datetime.now().astimezone(),
                expires,
                0,
                source_run,
            )
            self._remembered.append(record)
        return record

    def forget(self, memory_id: str) -> None:
        with self._lock:
            self._remembered = [record for record in self._remembered if record.memory_id != memory_id]
            if not memory_id.startswith("staged-"):
                self._forgotten.append(memory_id)

    def expire(self, now: datetime | None = None) -> int:
        # Expiry removes what is past its date whoever asks; it is not an effect of the attempt.
        return self.store.expire(now)

    @property
    def pending(self) -> int:
        return len(self._remembered) + len(self._forgotten)

    def apply(self, dedupe: bool = False) -> None:
        """Write the staged records and forgets; ``dedupe`` skips a record its run already wrote.

        A process killed between applying a unit's writes and journaling its commit leaves them in the
        store; the resumed process applies the unit again with ``dedupe`` (forgets are idempotent).
        """
        with self._lock:
            remembered, forgotten = list(self._remembered), list(self._forgotten)
            self._remembered.clear()
            self._forgotten.clear()
        for record in remembered:
            if dedupe and self._written(record):
                continue
            self.store.remember(record.task, record.memory, record.category, record.expires, record.source_run)
        for memory_id in forgotten:
            self.store.forget(memory_id)

    def discard(self) -> None:
        with self._lock:
            self._remembered.clear()
            self._forgotten.clear()

    def _written(self, record: MemoryRecord) -> bool:
        if record.source_run is None:
            return False  # no run to tell this ask's write from another task's with the same text
        return any(
            (found.memory, found.category, found.source_run) == (record.memory, record.category, record.source_run)
            for found in self.store.recall(record.task, 50, record.category)
        )
