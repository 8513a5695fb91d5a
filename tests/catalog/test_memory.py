"""The planner's memory: recall by task similarity, hits, dedup, expiry, two processes writing at once."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from semray.catalog.memory import MemoryStore, memory_id_of
from semray.errors import CatalogError

DIMENSION = 64


def bag_of_words(texts: Sequence[str]) -> np.ndarray:
    """A deterministic embedder: each word hashed into one of 64 dimensions (tasks sharing words are near)."""
    vectors = np.zeros((len(texts), DIMENSION), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in text.lower().split():
            vectors[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % DIMENSION] += 1.0
        vectors[row, 0] += 0.01  # never the zero vector
    return vectors


@pytest.fixture()
def store(tmp_path: Path) -> MemoryStore:
    return MemoryStore.open(tmp_path / "catalog", bag_of_words)


def test_recall_ranks_by_task_similarity_and_counts_hits(store: MemoryStore) -> None:
    assert store.recall("anything") == []  # nothing written yet: no table
    orders = store.remember("count orders by region", "orders.region is NULL for web orders", "dataset", "run-1")
    store.remember("average review rating per product", "ratings are 1 to 5", "domain")
    store.remember("summarise support tickets", "tickets.body is html", "dataset")
    recalled = store.recall("orders by region last year", k=2)
    assert recalled[0].memory_id == orders
    first = recalled[0]
    assert (first.task, first.category, first.source_run, first.hits) == (
        "count orders by region",
        "dataset",
        "run-1",
        1,
    )
    assert recalled[0].score > recalled[1].score and len(recalled) == 2
    assert store.recall("orders by region", k=1)[0].hits == 2  # the stored count went up too
    assert store.recall("tickets", k=5, categories=["domain"])[0].category == "domain"
    assert store.recall("tickets", k=5, categories=[]) == []


def test_the_same_memory_of_the_same_task_is_merged(store: MemoryStore) -> None:
    first = store.remember("count orders", "region is NULL for web orders", "dataset", ttl=timedelta(hours=1))
    store.recall("count orders")
    again = store.remember("count  orders ", "region is NULL for web orders", "failure", "run-2", ttl=timedelta(days=2))
    assert again == first == memory_id_of("count orders", "region is NULL for web orders")
    assert store.count() == 1
    (merged,) = store.recall("count orders")
    assert merged.category == "failure" and merged.source_run == "run-2"
    assert merged.hits == 2  # kept the hit of before the merge
    assert merged.expires is not None and merged.expires > datetime.now(UTC) + timedelta(days=1)  # the later expiry
    store.remember("count orders", "region is NULL for web orders", "dataset")  # no ttl: never expires
    assert store.recall("count orders")[0].expires is None
    store.remember("count orders", "a different memory", "dataset")
    assert store.count() == 2


def test_expired_memories_are_not_recalled_and_expire_drops_them(store: MemoryStore) -> None:
    store.remember("join customers", "customer ids differ in case", "dataset", ttl=timedelta(hours=1))
    store.remember("join customers", "use the crm table", "plan")
    store.remember("join customers", "already stale", "plan", ttl=timedelta(microseconds=1))
    assert {m.memory for m in store.recall("join customers", k=10)} == {
        "customer ids differ in case",
        "use the crm table",
    }
    assert store.count() == 3
    assert store.expire() == 1
    assert store.expire(now=datetime.now(UTC) + timedelta(hours=2)) == 1
    assert [m.memory for m in store.recall("join customers", k=10)] == ["use the crm table"]
    assert store.expire(now=datetime(2100, 1, 1)) == 0  # a naive time is UTC; nothing left that expires


def test_forget_drops_one_memory(store: MemoryStore) -> None:
    assert store.forget("nothing") is False
    kept = store.remember("task a", "memory a", "plan")
    gone = store.remember("task a", "memory b", "plan")
    assert store.forget(gone) is True and store.forget(gone) is False
    assert [m.memory_id for m in store.recall("task a", k=5)] == [kept]
    assert store.forget("x' OR '1' = '1") is False and store.count() == 1  # an id is a literal, never SQL


def test_bad_input_is_refused_with_a_named_error(store: MemoryStore, tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="non-empty memory"):
        store.remember("task", "  ", "plan")
    with pytest.raises(CatalogError, match="ttl must be positive"):
        store.remember("task", "memory", "plan", ttl=timedelta(0))
    with pytest.raises(CatalogError, match="k of at least 1"):
        store.recall("task", k=0)
    store.remember("task", "memory", "plan")
    wider = MemoryStore.open(tmp_path / "catalog", lambda texts: np.ones((len(texts), 8), np.float32))
    with pytest.raises(CatalogError, match="64 dimensions, the embedder gives 8"):
        wider.remember("task", "other", "plan")
    broken = MemoryStore.open(tmp_path / "catalog", lambda texts: np.zeros((len(texts), DIMENSION), np.float32))
    with pytest.raises(CatalogError, match="zero or non-finite"):
        broken.recall("task")


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_memory import bag_of_words
    from semray.catalog.memory import MemoryStore

    store = MemoryStore.open(Path({folder!r}), bag_of_words)
    name = sys.argv[1]
    for i in range(12):
        store.remember(f"task {{name}} {{i}}", f"memory {{i}}", "plan")
        store.remember("shared task", "shared memory", "plan")  # the same row from both processes
        store.recall("shared task", k=1)
    """
)


def test_two_processes_writing_at_once_lose_nothing_and_merge_duplicates(tmp_path: Path) -> None:
    folder = tmp_path / "catalog"
    script = WRITER.format(tests=str(Path(__file__).parent), folder=str(folder))
    writers = [
        subprocess.Popen([sys.executable, "-c", script, name], stderr=subprocess.PIPE, text=True) for name in "ab"
    ]
    for writer in writers:
        _, errors = writer.communicate(timeout=240)
        assert writer.returncode == 0, errors[-3000:]
    store = MemoryStore.open(folder, bag_of_words)
    assert store.count() == 2 * 12 + 1
    (shared,) = [m for m in store.recall("shared task", k=3) if m.memory == "shared memory"]
    assert shared.hits == 2 * 12 + 1  # every recall of both processes counted, none lost, plus this one
