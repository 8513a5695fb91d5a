"""A process for the SIGKILL-during-the-run test: one ``plan_question`` whose plan runs slowly.

    run_child.py STATE DATA CALLS MARK

The planner is a recording (a wrong first draft, then the gold one, judged); every model call
appends ``pid agent/step`` to CALLS. The executor stands for the engine: it writes MARK (the run
has started) and sleeps, so the test kills the process while the plan runs.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from agent_fixtures import QUESTION, accepts, choose, gold_document, outline, plan, recorded, write_data

from semray.operators import Node
from semray.planner.agents import LoopConfig, SourceCatalog, plan_question
from semray.planner.agents.ask_journal import open_ask_trace
from semray.planner.agents.models import AgentCall
from semray.planner.agents.recorded import RecordedModel
from semray.serving.contract import ModelResponse

MODEL = "recorded-run-child"
OPS = ("scan", "join", "aggregate")


class LoggedModel:
    """A recorded model that logs every call it answers (what a process paid for)."""

    def __init__(self, inner: RecordedModel, calls: Path) -> None:
        self.inner, self.calls = inner, calls
        self.profile, self.name, self.structured_output = inner.profile, MODEL, inner.structured_output

    def answer(self, call: AgentCall) -> ModelResponse:
        with self.calls.open("a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()} {call.agent}/{call.step}\n")
        return self.inner.answer(call)


def planner(catalog: SourceCatalog, calls: Path) -> LoggedModel:
    wrong = plan(gold_document(catalog, "avg(ratng)"))
    model = recorded(
        profiling_choose=[choose("reviews", "products")] * 2,
        planning_outline=[outline(*OPS)],
        manipulation_fill=[wrong, plan(gold_document(catalog))],
        semantic_judge=accepts(),
    )
    return LoggedModel(model, calls)


def ask(state: Path, data: Path, model: Any, executor: Any) -> Any:
    catalog = SourceCatalog.from_paths(write_data(data))
    trace = open_ask_trace(state, QUESTION, MODEL)
    try:
        return plan_question(
            QUESTION,
            catalog=catalog,
            model=model,
            config=LoopConfig(judges=3),
            executor=executor,
            run_id=trace.ask_id,
            trace=trace,
        )
    finally:
        trace.close()


def kill_once_running(script: Path, state: Path, data: Path, calls: Path, mark: Path, timeout_s: float = 60.0) -> None:
    """Run ``script STATE DATA CALLS MARK`` in a process of its own and SIGKILL it once it wrote MARK (its slow run
    started)."""
    import signal
    import subprocess

    child = subprocess.Popen(
        [sys.executable, str(script), str(state), str(data), str(calls), str(mark)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "SEMRAY_LOG_LEVEL": "warning"},
    )
    deadline = time.monotonic() + timeout_s
    while not mark.exists():
        assert child.poll() is None and time.monotonic() < deadline, f"{script.name} never started its slow run"
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()


def main(argv: list[str]) -> int:
    state, data, calls, mark = (Path(item) for item in argv[:4])

    def slow_run(_plan: Node) -> str:
        mark.write_text("running", encoding="utf-8")
        time.sleep(60)
        return "rows"

    ask(state, data, planner(SourceCatalog.from_paths(write_data(data)), calls), slow_run)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
