"""Competitive sub-agents: candidate drafts from isolated contexts, each validated; the cheapest valid plan by the
cost model wins, and the losers leave no trace in later prompts or long-term memory."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import PROFILE, QUESTION, catalog_of, choose, gold_document, outline, plan, recorded

from semray.errors import ExecutionError
from semray.operators import Node, plan_to_json
from semray.planner.agents import ListMemory, plan_question
from semray.planner.agents.competition import default_cost
from semray.planner.agents.errors import RetryLimitError
from semray.planner.agents.loop import LoopConfig

OPS = ("scan", "join", "sem_filter", "aggregate")


def with_semantic_filter(document: dict[str, Any]) -> dict[str, Any]:
    """The same answer with a model call per row: valid, and dearer."""
    dearer = copy.deepcopy(document)
    dearer["plan"]["input"] = {
        "op": "sem_filter",
        "instruction": "{review} is a review",
        "input": dearer["plan"]["input"],
    }
    return dearer


def test_the_cheapest_valid_candidate_wins(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    gold = gold_document(catalog)
    dear, wrong = with_semantic_filter(gold), gold_document(catalog, "avg(ratng)")
    cost = default_cost(PROFILE)
    assert cost(_node(catalog, dear))[0] > cost(_node(catalog, gold))[0] == 0.0
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(dear), plan(wrong), plan(gold)],
    )
    config = LoopConfig(semantic=False, candidates=3)
    result = plan_question(QUESTION, catalog=catalog, model=model, config=config)
    assert json.loads(result.plan_json) == json.loads(plan_to_json(_node(catalog, gold)))
    assert result.iterations == 1 and all(count == 0 for count in model.remaining().values())
    fills = [dict(step.inputs)["prompt"] for step in result.trace.steps if step.kind == "fill"]
    assert len(fills) == 3 and len(set(fills)) == 1  # isolated: no candidate saw another's draft

    # One candidate: the first draft is the plan, dear or not.
    single = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(dear)],
    )
    alone = plan_question(QUESTION, catalog=catalog, model=single, config=LoopConfig(semantic=False))
    assert "sem_filter" in alone.plan_json
    with pytest.raises(RetryLimitError):
        LoopConfig(candidates=0)


def test_losing_candidates_leave_no_trace_in_later_prompts_or_memory(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    gold, loser = gold_document(catalog), gold_document(catalog, "avg(ratng)")
    model = recorded(
        profiling_choose=[choose("reviews", "products")] * 2,
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(loser), plan(gold), plan(gold), plan(loser)],
    )
    runs: list[Node] = []

    def executor(node: Node) -> str:
        runs.append(node)
        if len(runs) == 1:
            raise ExecutionError("Binder Error: the source changed under the plan")
        return "rows"

    memory = ListMemory()
    config = LoopConfig(semantic=False, candidates=2)
    result = plan_question(QUESTION, catalog=catalog, model=model, memory=memory, config=config, executor=executor)
    assert result.executed == "rows" and len(runs) == 2 and result.iterations == 2
    fills = [dict(step.inputs)["prompt"] for step in result.trace.steps if step.kind == "fill"]
    assert len(fills) == 4 and "ratng" not in "".join(fills)  # the losing drafts and their issues went nowhere
    assert "Binder Error" in fills[2]  # the winner's failed run is the next plan unit's feedback
    assert all("ratng" not in record.memory for record in memory.records)


def _node(catalog: Any, document: dict[str, Any]) -> Node:
    from semray.planner.agents.grammar import check_plan_text

    report = check_plan_text(json.dumps(document), catalog, ("reviews", "products"))
    assert report.ok and report.plan is not None, report.issues
    return report.plan
