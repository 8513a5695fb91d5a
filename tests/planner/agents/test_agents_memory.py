"""Smart memory: a repeated error is promoted into knowledge, a one-off expires, knowledge is recalled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from agent_fixtures import QUESTION, accepts, catalog_of, choose, gold_document, outline, plan, recorded

from semray.planner.agents import ListMemory, plan_question
from semray.planner.agents.memory import FAILURE, KNOWLEDGE, classify_message

OPS = ("scan", "join", "aggregate")


def _wrong_then_right(catalog: object) -> object:
    return recorded(
        profiling_choose=[choose("reviews", "products")] * 2,
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog, "avg(ratng)")), plan(gold_document(catalog))],  # type: ignore[arg-type]
        semantic_judge=accepts(),
    )


def test_a_one_off_error_is_kept_as_a_failure_that_expires(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory(tmp_path / "memory.json")
    plan_question(QUESTION, catalog=catalog, model=_wrong_then_right(catalog), memory=memory)  # type: ignore[arg-type]
    (record,) = memory.records
    assert record.category == FAILURE and "ratng" in record.memory
    assert record.expires is not None and record.expires > datetime.now(UTC) + timedelta(days=6)
    assert ListMemory(tmp_path / "memory.json").records == memory.records  # saved
    assert memory.expire(datetime.now(UTC) + timedelta(days=8)) == 1
    assert memory.records == ()


def test_a_repeated_error_is_promoted_into_knowledge_and_recalled_next_time(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    plan_question(QUESTION, catalog=catalog, model=_wrong_then_right(catalog), memory=memory)  # type: ignore[arg-type]
    plan_question(QUESTION, catalog=catalog, model=_wrong_then_right(catalog), memory=memory)  # type: ignore[arg-type]
    (record,) = memory.records
    assert record.category == KNOWLEDGE and record.expires is None
    assert "Recurring data error (2 times)" in record.memory and "ratng" in record.memory
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog))],
        semantic_judge=accepts(),
    )
    result = plan_question(QUESTION, catalog=catalog, model=model, memory=memory)
    assert "ratng" in result.trace.of("memory")[0].output  # recalled
    for agent in ("profiling", "planning", "manipulation"):
        prompts = [dict(step.inputs).get("prompt", "") for step in result.trace.of(agent)]
        assert any("Recurring data error" in prompt for prompt in prompts), agent
    assert memory.expire(datetime.now(UTC) + timedelta(days=365)) == 0  # knowledge does not expire


def test_without_memory_nothing_is_written(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    from semray.planner.agents import LoopConfig

    plan_question(
        QUESTION,
        catalog=catalog,
        model=_wrong_then_right(catalog),
        memory=memory,  # type: ignore[arg-type]
        config=LoopConfig(memory=False),
    )
    assert memory.records == ()


def test_the_dictionary_classifies_each_category() -> None:
    assert classify_message('Binder Error: Referenced column "x" not found') == "data"
    assert classify_message("Conversion Error: could not convert 'a' to INT64") == "data"
    assert classify_message("plan is not valid JSON: Expecting value") == "grammar"
    assert classify_message("12 of 40 rows got no answer") == "semantic"
    assert classify_message("something else entirely") is None
