"""A stopped or failed pipeline gives back its actors (``semray.cluster.release``), without Ray.

What stands in for Ray Data here: a ``Pool`` (an actor pool: its actors live while anything refers
to it) in a reference cycle, held by the frames of the tracebacks of the error that ended the
pipeline. Ray's own error sits in a suppressed context below semray's, as
``pipeline/ray/failures.reported_failures`` raises it.
"""

from __future__ import annotations

import gc
import traceback
import weakref
from collections.abc import Iterator

import pytest

from semray.cluster import release
from semray.cluster.release import release_pipeline
from semray.errors import ExecutionError
from semray.transactions import RunCancelledError


class Pool:
    """An actor pool: in a reference cycle, as Ray Data's executor and its operators are."""

    def __init__(self) -> None:
        self.me = self

    def run_batch(self) -> None:
        raise RuntimeError("RayTaskError(RunCancelledError): a task of the pool raised")


class ExecutorThread:
    """Catches a task's error and keeps it, as Ray Data's executor thread does for the driver."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.error: RuntimeError | None = None

    def step(self) -> None:
        try:
            self.pool.run_batch()
        except RuntimeError as error:
            self.error = error


def stopped_pipeline(pools: list[weakref.ref[Pool]]) -> RunCancelledError:
    """Run a pipeline whose actor raises at a budget stop; the error the driver raises."""
    pool = Pool()
    pools.append(weakref.ref(pool))
    thread = ExecutorThread(pool)
    thread.step()
    try:
        assert thread.error is not None
        raise thread.error
    except RuntimeError:
        try:
            raise RunCancelledError("run r1 stopped: cost $0.0585 reached the budget $0.0500") from None
        except RunCancelledError as error:
            return error


@pytest.fixture
def no_collector() -> Iterator[None]:
    """Python's cycle collector off: what is freed, is freed by ``release_pipeline``."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.usefixtures("no_collector")
def test_a_stopped_pipeline_lets_go_of_its_pools_while_its_error_is_held() -> None:
    pools: list[weakref.ref[Pool]] = []
    error = stopped_pipeline(pools)
    assert pools[0]() is not None  # the premise: the error keeps the pool alive

    release_pipeline(error)

    assert pools[0]() is None
    assert "run r1 stopped" in str(error)
    # What a traceback shows stays: the lines of semray's error (only the frames' locals went).
    assert "stopped_pipeline" in "".join(traceback.format_exception(error))


@pytest.mark.usefixtures("no_collector")
def test_an_error_raised_from_another_keeps_both_tracebacks() -> None:
    def read() -> None:
        raise OSError("disk gone")

    try:
        try:
            read()
        except OSError as cause:
            raise ExecutionError("the pipeline failed: OSError: disk gone") from cause
    except ExecutionError as caught:
        error = caught

    release_pipeline(error)

    shown = "".join(traceback.format_exception(error))
    assert "in read" in shown and "disk gone" in shown
    assert error.__cause__ is not None and error.__cause__.__traceback__ is not None


def test_the_running_frame_is_left_as_it_is() -> None:
    marker = object()
    try:
        raise ExecutionError("the pipeline failed")
    except ExecutionError as error:
        release_pipeline(error)  # this frame is in its traceback, and still running
    assert marker is not None


class FakePool:
    """A Ray Data actor pool as ``pool_actors`` reads it."""

    def __init__(self, running: list[str], pending: list[str]) -> None:
        self._running_actors = dict.fromkeys(running, "state")
        self._pending_actors = {f"ready-{actor}": actor for actor in pending}


class FakeOperator:
    def __init__(self, pools: list[FakePool]) -> None:
        self.pools = pools

    def get_autoscaling_actor_pools(self) -> list[FakePool]:
        return self.pools


class FakeExecutor:
    def __init__(self, *operators: FakeOperator) -> None:
        self._topology = dict.fromkeys(operators, "op state")
        self._shutdown = False


@pytest.fixture
def killed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, bool]]:
    calls: list[tuple[object, bool]] = []
    monkeypatch.setattr(release.ray, "kill", lambda actor, no_restart=True: calls.append((actor, no_restart)))
    return calls


def test_a_failed_execution_kills_the_actors_its_pools_held(killed: list[tuple[object, bool]]) -> None:
    pool = FakePool(running=["filter-1", "filter-2"], pending=["filter-3"])
    executor = FakeExecutor(FakeOperator([]), FakeOperator([pool]))
    callback = release.KillActorsOnFailure()
    callback.on_execution_step(executor)
    pool._running_actors.pop("filter-2")  # the pool's scaler let go of it: not kept, not killed
    callback.on_execution_step(executor)
    # Ray Data shuts the pools down (dropping their handles), then reports the failure.
    executor._shutdown = True
    pool._running_actors.clear()
    pool._pending_actors.clear()
    callback.on_execution_step(executor)

    callback.after_execution_fails(executor, RunCancelledError("run r1 stopped"))

    assert killed == [("filter-1", True), ("filter-3", True)]


def test_a_finished_execution_is_left_to_ray_data(killed: list[tuple[object, bool]]) -> None:
    executor = FakeExecutor(FakeOperator([FakePool(running=["classify-1"], pending=[])]))
    callback = release.KillActorsOnFailure()
    callback.on_execution_step(executor)
    callback.after_execution_succeeds(executor)
    callback.after_execution_fails(executor, ExecutionError("failed after it finished"))
    assert killed == []


def test_moved_internals_kill_nothing(killed: list[tuple[object, bool]]) -> None:
    assert release.pool_actors(object()) == []
