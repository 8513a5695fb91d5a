"""Workflow materialization: a plan that was validated and ran is a skill; a question it fits is not planned
again, a similar one rebinds its constants, and a skill whose reuse fails validation is demoted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import QUESTION, accepts, catalog_of, choose, gold_document, judge, outline, plan, recorded, scan

from semray.errors import ExecutionError
from semray.operators import Node, plan_to_json
from semray.planner.agents import ListMemory, RecordingExhaustedError, SourceCatalog, plan_question
from semray.planner.agents.loop import LoopConfig
from semray.planner.agents.skills import SKILL, bind, embedding_similarity, lexical_similarity, question_template

OPS = ("scan", "join", "aggregate")
AT_LEAST_4 = "How many reviews have a rating of at least 4?"


class Executor:
    """Stands for the engine: keeps every plan it was given; fails the ones ``fail`` says."""

    def __init__(self, fail: int = 0) -> None:
        self.plans: list[Node] = []
        self.fail = fail

    def __call__(self, plan: Node) -> Any:
        self.plans.append(plan)
        if len(self.plans) <= self.fail:
            raise ExecutionError("Binder Error: the source changed under the plan")
        return "rows"


def counted(catalog: SourceCatalog, predicate: str) -> dict[str, Any]:
    """Reviews with a rating of at least some value, counted."""
    reviews = {"op": "filter", "predicate": predicate, "input": scan(catalog.describe("reviews"))}
    return {"version": 1, "plan": {"op": "aggregate", "aggs": [{"name": "n", "expr": "count(*)"}], "input": reviews}}


def full_recording(document: dict[str, Any], *datasets: str, judged: bool = False) -> Any:
    ops = ("scan", "filter", "aggregate") if len(datasets) == 1 else OPS
    answers: dict[str, Any] = {
        "profiling_choose": [choose(*datasets)],
        "planning_outline": [outline(*ops)],
        "manipulation_fill": [plan(document)],
    }
    if judged:
        answers["semantic_judge"] = accepts()
    return recorded(**answers)


def skills(memory: ListMemory) -> list[dict[str, Any]]:
    return [json.loads(record.memory) for record in memory.records if record.category == SKILL]


def test_a_question_template_binds_only_a_question_of_the_same_words() -> None:
    template, names = question_template(AT_LEAST_4, (("4", "plan.filter.predicate"), ("Oslo", "x")))
    assert names == ["p0"] and template[-1] == "{p0}" and "oslo" not in template
    assert bind(template, "how many REVIEWS have a rating of at least 2") == {"p0": "2"}
    assert bind(template, "How many reviews have a price of at least 2?") is None
    assert bind(template, "How many reviews have a rating of at least 2 stars?") is None


def test_a_repeated_question_is_planned_once_and_reuses_its_validated_plan(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    config = LoopConfig(semantic=False)
    first = plan_question(
        QUESTION,
        catalog=catalog,
        model=full_recording(gold_document(catalog), "reviews", "products"),
        memory=memory,
        config=config,
        executor=Executor(),
    )
    (stored,) = skills(memory)
    assert stored["question"] == QUESTION and stored["datasets"] == ["reviews", "products"]
    assert stored["evidence"] == ["grammar: valid", "ran"] and stored["parameters"] == []

    nothing = recorded()  # any model call would raise RecordingExhaustedError
    executor = Executor()
    second = plan_question(QUESTION, catalog=catalog, model=nothing, memory=memory, config=config, executor=executor)
    assert second.plan == first.plan and second.iterations == 0 and executor.plans == [first.plan]
    assert not any(step.model for step in second.trace.steps)
    assert "memory/skill" in [f"{step.agent}/{step.kind}" for step in second.trace.steps]
    assert len(skills(memory)) == 1  # reusing a skill does not store it again

    # With judges, the reuse makes only validation calls.
    judges = recorded(semantic_judge=accepts())
    judged = plan_question(QUESTION, catalog=catalog, model=judges, memory=memory, executor=Executor())
    assert {step.kind for step in judged.trace.steps if step.model} == {"judge"}
    assert all(count == 0 for count in judges.remaining().values())


def test_a_similar_question_rebinds_the_skills_constants(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    config = LoopConfig(semantic=False)
    model = full_recording(counted(catalog, "rating >= 4"), "reviews")
    plan_question(AT_LEAST_4, catalog=catalog, model=model, memory=memory, config=config, executor=Executor())
    (stored,) = skills(memory)
    assert stored["parameters"] == [
        {"name": "p0", "path": "plan.aggregate.input.filter.predicate", "kind": "filter value", "value": "4"}
    ]

    executor = Executor()
    similar = "How many reviews have a rating of at least 2?"
    reused = plan_question(similar, catalog=catalog, model=recorded(), memory=memory, config=config, executor=executor)
    assert json.loads(reused.plan_json)["plan"]["input"]["predicate"] == "rating >= 2"
    assert executor.plans == [reused.plan] and reused.datasets == ("reviews",)

    other = "How many products cost more than 30?"
    with pytest.raises(RecordingExhaustedError, match="recording has 0 answer"):  # not a fit: it is planned
        plan_question(other, catalog=catalog, model=recorded(), memory=memory, config=config, executor=Executor())


def test_a_plan_that_did_not_run_is_no_skill(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    model = full_recording(gold_document(catalog), "reviews", "products")
    plan_question(QUESTION, catalog=catalog, model=model, memory=memory, config=LoopConfig(semantic=False))
    assert skills(memory) == []
    skipped = LoopConfig(semantic=False, skills=False)
    model = full_recording(gold_document(catalog), "reviews", "products")
    plan_question(QUESTION, catalog=catalog, model=model, memory=memory, config=skipped, executor=Executor())
    assert skills(memory) == []


def test_a_skill_whose_reuse_fails_validation_is_demoted_and_the_question_planned(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    config = LoopConfig(semantic=False)
    model = full_recording(gold_document(catalog), "reviews", "products")
    plan_question(QUESTION, catalog=catalog, model=model, memory=memory, config=config, executor=Executor())
    (old,) = [record.memory_id for record in memory.records if record.category == SKILL]

    # The skill's plan fails its run; the question is then planned (and that plan runs).
    fixed = gold_document(catalog, "avg(rating) * 1.0")
    model = full_recording(fixed, "reviews", "products")
    executor = Executor(fail=1)
    result = plan_question(QUESTION, catalog=catalog, model=model, memory=memory, config=config, executor=executor)
    assert all(count == 0 for count in model.remaining().values())
    assert len(executor.plans) == 2 and result.plan == executor.plans[1] and result.iterations == 1
    demoted = [step for step in result.trace.steps if step.kind == "skill_demote"]
    assert len(demoted) == 1 and "Binder Error" in demoted[0].output
    records = [record for record in memory.records if record.category == SKILL]
    assert old not in [record.memory_id for record in records]  # not retrieved again
    (stored,) = skills(memory)
    assert stored["plan"] == json.loads(plan_to_json(result.plan))


def test_skills_live_in_the_catalogs_memory_table_and_a_demoted_one_is_gone_from_it(tmp_path: Path) -> None:
    import hashlib

    import numpy as np

    from semray.catalog.memory import MemoryStore
    from semray.planner.agents.catalog_adapter import StoreMemory

    def bag_of_words(texts: list[str]) -> np.ndarray:
        vectors = np.zeros((len(texts), 32), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                vectors[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % 32] += 1.0
            vectors[row, 0] += 0.01
        return vectors

    catalog = catalog_of(tmp_path)
    memory = StoreMemory(MemoryStore.open(tmp_path / "catalog", bag_of_words))
    config = LoopConfig(semantic=False)
    model = full_recording(counted(catalog, "rating >= 4"), "reviews")
    plan_question(AT_LEAST_4, catalog=catalog, model=model, memory=memory, config=config, executor=Executor())
    (record,) = memory.recall(AT_LEAST_4, 5, SKILL)

    similar = "How many reviews have a rating of at least 5?"
    nothing = recorded()
    reused = plan_question(similar, catalog=catalog, model=nothing, memory=memory, config=config, executor=Executor())
    assert json.loads(reused.plan_json)["plan"]["input"]["predicate"] == "rating >= 5"

    failing = Executor(fail=1)
    model = full_recording(counted(catalog, "rating >= 5"), "reviews")
    plan_question(similar, catalog=catalog, model=model, memory=memory, config=config, executor=failing)
    assert record.memory_id not in [found.memory_id for found in memory.recall(AT_LEAST_4, 5, SKILL)]


def test_a_paraphrased_question_refills_a_similar_skill_and_a_different_one_is_planned(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    config = LoopConfig(semantic=False)
    model = full_recording(counted(catalog, "rating >= 4"), "reviews")
    plan_question(AT_LEAST_4, catalog=catalog, model=model, memory=memory, config=config, executor=Executor())

    for paraphrase, value in (
        ("Count the reviews rated at least 2", "2"),
        ("What is the number of reviews with a rating of at least 3?", "3"),
    ):
        assert bind(skills(memory)[0]["template"], paraphrase) is None  # not the template's words
        executor = Executor()
        reused = plan_question(
            paraphrase, catalog=catalog, model=recorded(), memory=memory, config=config, executor=executor
        )
        assert json.loads(reused.plan_json)["plan"]["input"]["predicate"] == f"rating >= {value}"
        assert reused.skill == AT_LEAST_4 and reused.iterations == 0 and executor.plans == [reused.plan]
        (found,) = [step for step in reused.trace.steps if step.kind == "skill"]
        assert "similarity 1.00" in found.output

    # Similar words, another meaning (below the similarity), or not the skill's count of numbers: planned.
    for different in ("How many reviews have a rating of at most 2?", "Count the reviews rated at least 2 or 3"):
        with pytest.raises(RecordingExhaustedError, match="recording has 0 answer"):
            plan_question(different, catalog=catalog, model=recorded(), memory=memory, config=config)
    strict = LoopConfig(semantic=False, skill_similarity=1.0)
    assert lexical_similarity(AT_LEAST_4, "Count reviews rated at least 2") == pytest.approx(1.0)
    with pytest.raises(RecordingExhaustedError):  # the threshold is honoured: 0.87 < 1.0
        plan_question(
            "Count the good reviews rated at least 2", catalog=catalog, model=recorded(), memory=memory, config=strict
        )


def test_a_refilled_skill_whose_reuse_fails_is_demoted(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    config = LoopConfig(semantic=False)
    model = full_recording(counted(catalog, "rating >= 4"), "reviews")
    plan_question(AT_LEAST_4, catalog=catalog, model=model, memory=memory, config=config, executor=Executor())
    model = full_recording(counted(catalog, "rating >= 2"), "reviews")
    executor = Executor(fail=1)
    result = plan_question(
        "Count the reviews rated at least 2",
        catalog=catalog,
        model=model,
        memory=memory,
        config=config,
        executor=executor,
    )
    assert result.skill is None and result.iterations == 1 and len(executor.plans) == 2
    (demoted,) = [step for step in result.trace.steps if step.kind == "skill_demote"]
    assert "Binder Error" in demoted.output
    # The failed skill is gone; the new plan, which ran, is the one skill now.
    assert [stored["question"] for stored in skills(memory)] == ["Count the reviews rated at least 2"]


def test_skills_are_found_by_the_memory_embedding_when_given(tmp_path: Path) -> None:
    """The embedding tier's cosine decides; here an embedder that knows 'tally' and 'count' are alike."""
    synonyms = {"tally": "count", "scored": "rated"}

    def embed(texts: list[str]) -> list[list[float]]:
        vocabulary = ["count", "reviews", "rated", "least", "products"]
        rows = []
        for text in texts:
            found = [synonyms.get(word, word) for word in text.lower().replace("?", "").split()]
            rows.append([float(word in found) for word in vocabulary])
        return rows

    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    config = LoopConfig(semantic=False)
    question = "Count reviews rated at least 4"
    model = full_recording(counted(catalog, "rating >= 4"), "reviews")
    plan_question(question, catalog=catalog, model=model, memory=memory, config=config, executor=Executor())
    similarity = embedding_similarity(embed)
    paraphrase = "Tally reviews scored at least 5"
    assert lexical_similarity(question, paraphrase) < 0.75 <= similarity(question, paraphrase)
    reused = plan_question(
        paraphrase,
        catalog=catalog,
        model=recorded(),
        memory=memory,
        config=config,
        executor=Executor(),
        similarity=similarity,
    )
    assert json.loads(reused.plan_json)["plan"]["input"]["predicate"] == "rating >= 5"


def product_rating(catalog: SourceCatalog, product: str) -> dict[str, Any]:
    """The average rating of one product, named in a filter (a word parameter of the skill)."""
    join = {
        "op": "join",
        "on": "l.product_id = r.id",
        "left": scan(catalog.describe("reviews")),
        "right": scan(catalog.describe("products")),
    }
    named = {"op": "filter", "predicate": f"name = '{product}'", "input": join}
    return {
        "version": 1,
        "plan": {"op": "aggregate", "aggs": [{"name": "avg_rating", "expr": "avg(rating)"}], "input": named},
    }


LAMP = "What is the average rating of the lamp?"


def test_a_word_parameter_is_refilled_with_a_value_its_column_holds_and_a_wrong_one_is_rejected(
    tmp_path: Path,
) -> None:
    catalog = catalog_of(tmp_path)
    memory = ListMemory()
    config = LoopConfig(semantic=False)
    model = full_recording(product_rating(catalog, "lamp"), "reviews", "products")
    plan_question(LAMP, catalog=catalog, model=model, memory=memory, config=config, executor=Executor())
    (stored,) = skills(memory)
    assert stored["parameters"] == [
        {
            "name": "p0",
            "path": "plan.aggregate.input.filter.predicate",
            "kind": "filter value",
            "value": "lamp",
            "column": "name",
        }
    ]

    # Another product, in other words: re-filled (the data holds 'kettle' in products.name), validated, run.
    executor = Executor()
    kettle = "Give me the average rating of the Kettle"
    assert bind(stored["template"], kettle) is None
    reused = plan_question(kettle, catalog=catalog, model=recorded(), memory=memory, config=config, executor=executor)
    assert reused.skill == LAMP and reused.iterations == 0 and executor.plans == [reused.plan]
    assert json.loads(reused.plan_json)["plan"]["input"]["predicate"] == "name = 'kettle'"  # the data's spelling
    (found,) = [step for step in reused.trace.steps if step.kind == "skill"]
    assert "p0='kettle'" in found.output

    # A word no column holds is no re-fill: the question is planned, and the skill stays.
    with pytest.raises(RecordingExhaustedError, match="recording has 0 answer"):
        plan_question(
            "Give me the average rating of the sofa", catalog=catalog, model=recorded(), memory=memory, config=config
        )
    assert [skill["question"] for skill in skills(memory)] == [LAMP]

    # A re-fill the data holds but the judges reject: the reuse fails validation, the skill is forgotten.
    rejecting = recorded(
        semantic_judge=[judge("reject", "the chair is not what was asked", "plan anew")] * 3,
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(product_rating(catalog, "chair"))],
    )
    with pytest.raises(RecordingExhaustedError, match="semantic/judge"):  # planned anew: its judges are asked too
        plan_question("Give me the average rating of the chair", catalog=catalog, model=rejecting, memory=memory)
    assert skills(memory) == []
