"""Sub-agents at once: independent pieces of agent work run in threads, their results kept in order.

The three kinds of sub-agents (``competition.py``: candidates that compete; ``dataset_agents.py``:
independent profiling sub-agents, one per dataset; ``collaboration.py``: collaborators on branches
of one draft) each start their sub-agents through ``run_at_once``: at most ``parallelism`` run at
a time (a thread each: a model call is I/O, and the tier's own client serialises what must be),
none sees another's context (each has its own branch or lane), and the results come back in the
order the sub-agents were given, whatever order they finished in, so what follows (a pick, a merge)
does not depend on timing. An error raised by one is raised once all have ended (the first in
order); a sub-agent whose failure is expected (a unit that failed validation) returns it instead.

>>> run_at_once([lambda: 1, lambda: 2], parallelism=2)
[1, 2]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from semray.log import get_logger
from semray.planner.agents.errors import AgentError

log = get_logger(__name__)

T = TypeVar("T")
PARALLELISM = 4
"""Sub-agents running at once by default (``Settings.agent_parallelism``)."""


def run_at_once(tasks: Sequence[Callable[[], T]], parallelism: int = PARALLELISM) -> list[T]:
    """Run ``tasks``, at most ``parallelism`` at a time, and return their results in order.

    With one task, or ``parallelism`` 1, they run one after another in this thread.
    """
    if parallelism < 1:
        raise AgentError(f"parallelism is {parallelism}; at least 1 sub-agent runs at a time (agent_parallelism)")
    if len(tasks) <= 1 or parallelism == 1:
        return [task() for task in tasks]
    with ThreadPoolExecutor(max_workers=min(parallelism, len(tasks)), thread_name_prefix="semray-subagent") as pool:
        futures = [pool.submit(task) for task in tasks]
        errors = [future.exception() for future in futures]  # waits for every sub-agent
    for error in errors:
        if error is not None:
            log.info("subagent_failed", error=f"{type(error).__name__}: {error}"[:200], failed=sum(map(bool, errors)))
            raise error
    return [future.result() for future in futures]
