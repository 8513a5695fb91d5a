"""A process for the ask SIGKILL test: one dry-run ``semray.ask`` on a slow stand-in planner.

    ask_child.py STATE DATA CALLS [RESUME_ID]

The stand-in planner (``StandInPlanner``: gold plan, one injected fault on the first draft,
repaired when the feedback names it) waits ``ASK_CHILD_DELAY_S`` (0.2 by default) in every model
call and every long-term memory operation, so the test can kill the process at a chosen point.
Each model call appends ``pid agent/step sha256(prompt)`` to CALLS (flushed before the wait):
what a process paid for, and what it was shown. RESUME_ID resumes that ask by id; without it the
ask resumes the newest interrupted one of the same ask, if any. Prints ``ask: ID`` when the ask
starts and ``plan: JSON`` at the end.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from agent_fixtures import QUESTION, gold_document

from semray.asking import AskResult
from semray.asking import ask as semray_ask
from semray.planner.agents import ListMemory, SourceCatalog
from semray.planner.agents.catalog_view import MemoryRecord
from semray.planner.agents.models import AgentCall
from semray.planner.agents.standin import GoldCase, StandInPlanner
from semray.serving.contract import ModelResponse
from semray.settings import Settings

DELAY_S = float(os.environ.get("ASK_CHILD_DELAY_S", "0.2"))
SEED = 7


class SlowPlanner:
    """The stand-in planner, slowed, logging every call it is paid for."""

    def __init__(self, inner: StandInPlanner, calls: Path, delay_s: float) -> None:
        self.inner, self.calls, self.delay_s = inner, calls, delay_s
        self.profile, self.name, self.structured_output = inner.profile, inner.name, inner.structured_output

    def answer(self, call: AgentCall) -> ModelResponse:
        digest = hashlib.sha256(call.request.prompt.encode()).hexdigest()[:16]
        with self.calls.open("a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()} {call.agent}/{call.step} {digest}\n")
        time.sleep(self.delay_s)
        return self.inner.answer(call)


class SlowMemory:
    """A ``ListMemory`` whose every operation waits: the consolidation after the plan is a kill point."""

    def __init__(self, inner: ListMemory, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s

    def recall(self, task: str, limit: int = 5, category: str | None = None) -> Sequence[MemoryRecord]:
        time.sleep(self.delay_s)
        return self.inner.recall(task, limit, category)

    def remember(
        self, task: str, memory: str, category: str, expires: datetime | None = None, source_run: str | None = None
    ) -> MemoryRecord:
        time.sleep(self.delay_s)
        return self.inner.remember(task, memory, category, expires, source_run)

    def forget(self, memory_id: str) -> None:
        time.sleep(self.delay_s)
        self.inner.forget(memory_id)

    def expire(self, now: datetime | None = None) -> int:
        time.sleep(self.delay_s)
        return self.inner.expire(now)


def tables(data: Path) -> dict[str, Path]:
    return {name: data / f"{name}.csv" for name in ("reviews", "products", "weather")}


def planner(data: Path, calls: Path, delay_s: float) -> SlowPlanner:
    case = GoldCase(QUESTION, ("reviews", "products"), gold_document(SourceCatalog.from_paths(tables(data))))
    return SlowPlanner(StandInPlanner([case], fault_rate=1.0, repair_rate=1.0, seed=SEED), calls, delay_s)


def ask(state: Path, data: Path, calls: Path, delay_s: float, resume: str | None = None) -> AskResult:
    return semray_ask(
        QUESTION,
        tables=tables(data),
        model=planner(data, calls, delay_s),
        memory=SlowMemory(ListMemory(state / "memory.json"), delay_s),
        settings=Settings(state_dir=state),
        dry_run=True,
        resume=resume,
        on_start=lambda ask_id, _resumed: print(f"ask: {ask_id}", flush=True),
    )


def main(argv: list[str]) -> int:
    state, data, calls = Path(argv[0]), Path(argv[1]), Path(argv[2])
    result = ask(state, data, calls, DELAY_S, argv[3] if len(argv) > 3 else None)
    print("plan: " + result.plan_json.replace("\n", " "), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
