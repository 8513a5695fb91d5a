"""Wall-clock timing helpers."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

T = TypeVar("T")


class Stopwatch:
    """Measure one block: ``with Stopwatch() as watch: ...`` then ``watch.seconds``."""

    def __init__(self) -> None:
        self._start = 0.0
        self.seconds = 0.0

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.seconds = time.perf_counter() - self._start


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """Call ``fn`` once; return its result and the seconds it took."""
    with Stopwatch() as watch:
        value = fn()
    return value, watch.seconds


def repeat(fn: Callable[[], T], times: int) -> tuple[T, list[float]]:
    """Call ``fn`` ``times`` times; the last result and every duration (report the median)."""
    if times < 1:
        raise ValueError("repeat needs times >= 1")
    value, first = timed(fn)
    seconds = [first]
    for _ in range(times - 1):
        value, took = timed(fn)
        seconds.append(took)
    return value, seconds


def median(values: list[float]) -> float:
    return statistics.median(values)
