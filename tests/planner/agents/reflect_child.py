"""A process for the SIGKILL-after-a-failed-reflection test: the first plan's answer fails reflection, the second runs.

    reflect_child.py STATE DATA CALLS MARK

The planner is a recording (a draft averaging the wrong column, then the gold one; one judge each; the first
answer's reflection says it is implausible). Every model call appends ``pid agent/step`` to CALLS. The executor
stands for the engine: the first plan's answer is a column of nulls, given at once; the second plan writes MARK
and sleeps, so the test kills the process while it runs, after the failed reflection was paid and journaled.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import pyarrow as pa
from agent_fixtures import QUESTION, accepts, choose, gold_document, outline, plan, recorded, write_data
from run_child import LoggedModel

from semray.operators import Node
from semray.operators.serialize import plan_from_dict
from semray.planner.agents import LoopConfig, SourceCatalog, plan_question
from semray.planner.agents.ask_journal import open_ask_trace
from semray.planner.agents.recorded import RecordedAnswer
from semray.planner.agents.reflection import rendered_reflection

MODEL = "recorded-run-child"
OPS = ("scan", "join", "aggregate")
NULLS = pa.table({"name": ["lamp", "kettle", "chair"], "avg_rating": pa.array([None, None, None], pa.float64())})
GOLD = pa.table({"name": ["lamp", "kettle", "chair"], "avg_rating": [4.5, 2.5, 2.0]})
CONFIG = LoopConfig(judges=1, reflection=True)


def wrong(catalog: SourceCatalog) -> dict[str, Any]:
    return gold_document(catalog, "avg(product_id)")


def planner(catalog: SourceCatalog, calls: Path) -> LoggedModel:
    failed = RecordedAnswer(rendered_reflection("implausible", "avg_rating is all nulls", "logic", "average rating"))
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS), outline(*OPS)],
        manipulation_fill=[plan(wrong(catalog)), plan(gold_document(catalog))],
        semantic_judge=accepts(2),
        reflection_check=[failed],  # the second answer's reflection is never reached: killed while it runs
    )
    return LoggedModel(model, calls)


def is_gold(node: Node, catalog: SourceCatalog) -> bool:
    return node == plan_from_dict(gold_document(catalog))


def ask(state: Path, data: Path, model: Any, executor: Any) -> Any:
    catalog = SourceCatalog.from_paths(write_data(data))
    trace = open_ask_trace(state, QUESTION, MODEL)
    try:
        return plan_question(
            QUESTION, catalog=catalog, model=model, config=CONFIG, executor=executor, run_id=trace.ask_id, trace=trace
        )
    finally:
        trace.close()


def main(argv: list[str]) -> int:
    state, data, calls, mark = (Path(item) for item in argv[:4])
    catalog = SourceCatalog.from_paths(write_data(data))

    def engine(node: Node) -> pa.Table:
        if not is_gold(node, catalog):
            return NULLS
        mark.write_text("running", encoding="utf-8")
        time.sleep(60)
        return GOLD

    ask(state, data, planner(catalog, calls), engine)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
