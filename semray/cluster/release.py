"""Giving back a stopped or failed pipeline's Ray resources at once, not when Python's cycle
collector gets to them.

When a dataset's iteration raises (an actor's ``RunCancelledError`` at a budget stop, any task's
error), Ray Data shuts its executor down without killing the actor pools (``force=False``): it
drops its handles, and an actor ends once no handle to it (nor block it made) is left. The error that ended the
pipeline still holds handles. Its traceback's frames, and those of the Ray errors in its context
chain, keep the executor, its operators and their in-flight tasks alive. They sit in reference
cycles (an exception's traceback reaches frames whose locals reach the exception) that only the
cycle collector frees. A driver blocked on its next pipeline allocates too little to trigger a
full collection. So the stopped run's actors kept their CPUs, and a resume in the same process
waited for ever on a 1-CPU task (``tests/cluster/test_budget_ray.py``; 0.8 of the machine's 2
CPUs were free, 0.5 of them held by the stopped run's two actors).

Two remedies, because the error is not the only holder (a logging handler that keeps records, as
pytest's does, keeps Ray Data's own log record of the task's error, with its traceback):

* ``KillActorsOnFailure``, registered on the driver's ``DataContext`` by ``cluster.connect``:
  when an execution fails, it kills the actors its pools held, as Ray Data's own forced
  shutdown does (``ray.kill``), whatever still refers to the executor;
* ``release_pipeline``, called by ``pipeline.runs.execute`` on the way out of a failed run: the error's
  frames let go of the executor and its blocks, and the cycles are collected.

>>> try:
...     raise ValueError("the pipeline failed")
... except ValueError as error:
...     release_pipeline(error)
"""

from __future__ import annotations

import gc
import traceback
from collections.abc import Iterator
from typing import Any

import ray
from ray.actor import ActorHandle
from ray.data._internal.execution.execution_callback import ExecutionCallback

from semray.log import get_logger

log = get_logger(__name__)


def release_pipeline(error: BaseException) -> None:
    """Let go of what ``error`` holds of the pipeline it ended, then collect reference cycles,
    so that the pipeline's actors exit now and give back their CPUs.

    What a traceback of ``error`` prints stays: the errors it shows (itself, what it was raised
    from, and the errors it was raised while handling unless that context is suppressed) keep
    their tracebacks, and only the frames' local variables go. The errors it does not show (Ray's,
    which ``pipeline/ray/failures.reported_failures`` raises its own error over ``from None``) lose their
    tracebacks: theirs include the frames of Ray Data's executor thread, whose callers' frames
    (not in the traceback, so not cleared) hold the executor. A frame still running (the
    caller's) is left as it is.
    """
    shown = {id(linked) for linked in _chain(error, shown_only=True)}
    for linked in _chain(error):
        if id(linked) in shown:
            traceback.clear_frames(linked.__traceback__)
        else:
            linked.__traceback__ = None
    freed = gc.collect()
    log.debug("pipeline_released", error=type(error).__name__, objects_freed=freed)


def _chain(error: BaseException, shown_only: bool = False) -> Iterator[BaseException]:
    """``error`` and the errors it was raised from or while handling, each once; with
    ``shown_only``, those Python's traceback display shows (not those past a suppressed context)."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if current.__cause__ is not None:
            pending.append(current.__cause__)
        if current.__context__ is not None and not (shown_only and current.__suppress_context__):
            pending.append(current.__context__)


class KillActorsOnFailure(ExecutionCallback):
    """Kills a failed execution's actors (``DataContext.custom_execution_callback_classes``).

    Ray Data makes one per execution. At each scheduling step it notes the actors the execution's
    pools hold now (an actor a pool let go of is not kept alive by the note past the next step);
    when the execution fails, it kills those. A pipeline that succeeds, or that its consumer
    closes early (Ray Data kills those actors itself), is left to Ray Data.

    Reads Ray Data internals (``StreamingExecutor._topology``, the pools' ``_running_actors`` and
    ``_pending_actors``) of the pinned Ray (2.60); when they move, it notes nothing and logs once.
    """

    def __init__(self) -> None:
        self._actors: list[ActorHandle[Any]] = []

    def on_execution_step(self, executor: Any) -> None:
        if not getattr(executor, "_shutdown", False):
            self._actors = pool_actors(executor)

    def after_execution_succeeds(self, executor: Any) -> None:
        self._actors = []

    def after_execution_fails(self, executor: Any, error: Exception) -> None:
        actors, self._actors = self._actors, []
        for actor in actors:
            ray.kill(actor, no_restart=True)
        if actors:
            log.debug("failed_execution_actors_killed", actors=len(actors), error=type(error).__name__)


_INTERNALS_MOVED: list[str] = []


def pool_actors(executor: Any) -> list[ActorHandle[Any]]:
    """The actors (running or starting) of the actor pools of a Ray Data ``StreamingExecutor``."""
    try:
        actors: list[ActorHandle[Any]] = []
        for operator in executor._topology or {}:
            for pool in operator.get_autoscaling_actor_pools():
                actors.extend(pool._running_actors)
                actors.extend(pool._pending_actors.values())
        return actors
    except AttributeError as error:
        if not _INTERNALS_MOVED:
            _INTERNALS_MOVED.append(str(error))
            log.warning(
                "ray_data_internals_moved", error=str(error), note="a failed pipeline's actors end when collected"
            )
        return []
