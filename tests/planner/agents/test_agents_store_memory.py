"""Smart memory on the catalog's memory table (``StoreMemory`` over ``MemoryStore``): promotion,
expiry, an expiry already past, and an embedding tier loaded only when memory is touched."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from agent_fixtures import QUESTION, accepts, catalog_of, choose, gold_document, outline, plan, recorded

from semray.catalog.memory import MemoryStore, memory_id_of
from semray.errors import CatalogError
from semray.planner.agents import SourceCatalog, StepRunner, plan_question
from semray.planner.agents.catalog_adapter import StoreMemory, TierEmbedding
from semray.planner.agents.issues import PlanIssue
from semray.planner.agents.memory import FAILURE, KNOWLEDGE, MemoryManager
from semray.planner.agents.recorded import RecordedModel
from semray.serving.config import TierConfig

OPS = ("scan", "join", "aggregate")


def bag_of_words(texts: Sequence[str]) -> np.ndarray:
    """Deterministic: each word hashed into one of 32 dimensions (tasks sharing words are near)."""
    vectors = np.zeros((len(texts), 32), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in text.lower().split():
            vectors[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % 32] += 1.0
        vectors[row, 0] += 0.01
    return vectors


@pytest.fixture()
def store(tmp_path: Path) -> MemoryStore:
    return MemoryStore.open(tmp_path / "catalog", bag_of_words)


def _wrong_then_right(catalog: SourceCatalog) -> RecordedModel:
    return recorded(
        profiling_choose=[choose("reviews", "products")] * 2,
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog, "avg(ratng)")), plan(gold_document(catalog))],
        semantic_judge=accepts(),
    )


def _all(store: MemoryStore) -> list[dict[str, object]]:
    table = store._table()
    return [] if table is None else list(table.to_arrow().drop_columns(["task_vector"]).to_pylist())


def test_a_one_off_error_is_a_failure_in_the_memory_table_that_expires(tmp_path: Path, store: MemoryStore) -> None:
    catalog = catalog_of(tmp_path)
    plan_question(QUESTION, catalog=catalog, model=_wrong_then_right(catalog), memory=StoreMemory(store))
    (row,) = _all(store)
    assert row["category"] == FAILURE and "ratng" in str(row["memory"])
    expires = row["expires"]
    assert isinstance(expires, datetime) and expires > datetime.now(UTC) + timedelta(days=6)
    assert store.expire(datetime.now(UTC) + timedelta(days=8)) == 1
    assert store.count() == 0


def test_a_repeated_error_is_promoted_in_the_memory_table_and_recalled(tmp_path: Path, store: MemoryStore) -> None:
    catalog = catalog_of(tmp_path)
    memory = StoreMemory(store)
    for _ in range(2):
        plan_question(QUESTION, catalog=catalog, model=_wrong_then_right(catalog), memory=memory)
    (row,) = _all(store)  # the first run's failure was forgotten when the second promoted it
    assert row["category"] == KNOWLEDGE and row["expires"] is None
    assert "Recurring data error (2 times)" in str(row["memory"])
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog))],
        semantic_judge=accepts(),
    )
    result = plan_question(QUESTION, catalog=catalog, model=model, memory=memory)
    assert "ratng" in result.trace.of("memory")[0].output
    assert store.expire(datetime.now(UTC) + timedelta(days=365)) == 0


def test_an_expiry_already_past_is_not_written_and_a_future_one_is_kept_exactly(store: MemoryStore) -> None:
    memory = StoreMemory(store)
    past = datetime.now(UTC) - timedelta(seconds=1)
    record = memory.remember("count orders", "region is NULL", FAILURE, past, "run-1")
    assert record.memory_id == memory_id_of("count orders", "region is NULL") and record.expires == past
    assert store.count() == 0
    future = datetime.now(UTC) + timedelta(days=3)
    kept = memory.remember("count orders", "region is NULL", FAILURE, future, "run-2")
    (row,) = _all(store)
    assert row["memory_id"] == kept.memory_id == record.memory_id
    assert abs((row["expires"] - future).total_seconds()) < 1  # type: ignore[operator]
    assert [found.source_run for found in memory.recall("count orders")] == ["run-2"]


def test_consolidating_at_a_past_moment_writes_no_expired_failure(store: MemoryStore) -> None:
    model = recorded()
    manager = MemoryManager(StepRunner(model), StoreMemory(store), ttl=timedelta(days=7))
    manager.short.note((PlanIssue("plan.input", "column 'ratng' not found", "column", "use rating"),))
    manager.consolidate(QUESTION, "run-old", now=datetime.now(UTC) - timedelta(days=30))
    assert store.count() == 0  # it expired 23 days ago: nothing to keep, and no CatalogError
    manager.consolidate(QUESTION, "run-new")
    assert [row["source_run"] for row in _all(store)] == ["run-new"]


def test_the_embedding_tier_loads_only_when_memory_is_searched_or_written(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    embed = TierEmbedding(TierConfig(backend="simulated", model="any"))
    memory = StoreMemory(MemoryStore.open(tmp_path / "catalog", embed))
    right = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog))],
        semantic_judge=accepts(),
    )
    plan_question(QUESTION, catalog=catalog, model=right, memory=memory)
    assert not embed.loaded  # no memory table to search, no error to write
    with pytest.raises(CatalogError, match=r"sentence_transformers.*--memory-file"):
        plan_question(QUESTION, catalog=catalog, model=_wrong_then_right(catalog), memory=memory)
