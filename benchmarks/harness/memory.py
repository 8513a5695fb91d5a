"""Peak memory of a run: summed PSS of every process of the run, plus Ray's object store.

PSS (proportional set size) splits each shared page among the processes that map it, so
summing PSS over the driver, its children and every Ray process counts shared libraries
and shared memory once. Ray's object store lives in shared memory mapped by the raylet and
the workers: the pages it has touched are therefore already inside the PSS sum; the object
store figure is reported beside it (not added) so the two can be told apart.

>>> with MemorySampler(interval=0.05) as sampler:  # doctest: +SKIP
...     data = bytearray(50 << 20)
>>> sampler.peak().pss_bytes > 50 << 20  # doctest: +SKIP
True
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any

import psutil

THROTTLE = 5
"""The sampler waits at least this many times as long as its last reading took."""

_MEMORY_ERRORS = (
    psutil.NoSuchProcess,
    psutil.AccessDenied,
    psutil.ZombieProcess,
    FileNotFoundError,
    ProcessLookupError,
)


@dataclass(frozen=True, slots=True)
class MemorySample:
    """One reading: seconds since the sampler started, summed PSS, processes counted, object store bytes."""

    at: float
    pss_bytes: int
    processes: int
    object_store_bytes: int | None


@dataclass(frozen=True, slots=True)
class MemoryPeak:
    """Peaks over a window of samples (``object_store_bytes`` is ``None`` without an in-process Ray)."""

    pss_bytes: int
    object_store_bytes: int | None
    processes: int
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class MemorySampler:
    """Sample memory in a background thread while a block runs; ask for peaks afterwards.

    Processes counted: ``root_pid`` (default: this process), all its descendants, and any
    process whose command line contains one of ``markers`` or the session folder of a Ray
    started (or joined) by this process — this catches Ray processes that are not our
    children. The object store is read from the raylet when Ray is initialized here.
    ``pss=False`` reads only the object store (a process measured from outside samples itself
    less: reading PSS walks page tables and costs CPU).
    """

    def __init__(
        self,
        root_pid: int | None = None,
        markers: Sequence[str] = (),
        interval: float = 0.2,
        discover_every: float = 1.0,
        object_store: bool = True,
        store_every: float = 1.0,
        pss: bool = True,
    ) -> None:
        self._root = psutil.Process(root_pid or os.getpid())
        self._markers = tuple(markers)
        self._interval = interval
        self._discover_every = discover_every
        self._want_store = object_store
        self._want_pss = pss
        self._store_every = store_every
        self._store_read_at = float("-inf")
        self._store_bytes: int | None = None
        self._samples: list[MemorySample] = []
        self._phases: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.perf_counter()
        self._marked: set[int] = set()
        self._last_discovery = float("-inf")
        self._store_state: Any = None
        self.store_error: str | None = None
        """Why the object store could not be read, if it could not (reported, not raised)."""

    # lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> MemorySampler:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        self._started = time.perf_counter()
        self.sample()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.sample()

    def _run(self) -> None:
        # Reading PSS walks every process's page tables; on a small, busy machine one round
        # can take a large fraction of a second, so the sampler backs off to keep its own
        # CPU use under 1/THROTTLE of one core instead of slowing the run it measures.
        wait = self._interval
        while not self._stop.wait(wait):
            started = time.perf_counter()
            self.sample()
            wait = max(self._interval, THROTTLE * (time.perf_counter() - started))

    # readings --------------------------------------------------------------------------
    def sample(self) -> MemorySample:
        """Take one reading now (also called at both ends of every phase)."""
        pids = self._pids() if self._want_pss else []
        total = 0
        counted = 0
        for pid in pids:
            pss = process_pss(pid)
            if pss is not None:
                total += pss
                counted += 1
        reading = MemorySample(
            at=time.perf_counter() - self._started,
            pss_bytes=total,
            processes=counted,
            object_store_bytes=self._object_store_bytes(),
        )
        with self._lock:
            self._samples.append(reading)
        return reading

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Mark a named window; ``peak(name)`` then covers only the samples inside it."""
        start = self.sample().at
        try:
            yield
        finally:
            self._phases[name] = (start, self.sample().at)

    def peak(self, phase: str | None = None) -> MemoryPeak:
        """Peak PSS sum, object store and process count over everything or one phase."""
        with self._lock:
            samples = list(self._samples)
        if phase is not None:
            start, end = self._phases[phase]
            samples = [s for s in samples if start <= s.at <= end]
        stores = [s.object_store_bytes for s in samples if s.object_store_bytes is not None]
        return MemoryPeak(
            pss_bytes=max((s.pss_bytes for s in samples), default=0),
            object_store_bytes=max(stores) if stores else None,
            processes=max((s.processes for s in samples), default=0),
            samples=len(samples),
        )

    def phase_peaks(self) -> dict[str, MemoryPeak]:
        return {name: self.peak(name) for name in self._phases}

    @property
    def samples(self) -> tuple[MemorySample, ...]:
        with self._lock:
            return tuple(self._samples)

    # process discovery -----------------------------------------------------------------
    def _pids(self) -> set[int]:
        pids = {self._root.pid}
        with contextlib.suppress(*_MEMORY_ERRORS):
            pids.update(child.pid for child in self._root.children(recursive=True))
        now = time.perf_counter()
        if now - self._last_discovery >= self._discover_every:
            self._last_discovery = now
            markers = (*self._markers, *_ray_session_markers())
            if markers:
                self._marked = processes_matching(markers)
        return pids | self._marked

    def _object_store_bytes(self) -> int | None:
        """The object store's bytes in use, asked of the raylet at most every ``store_every`` seconds."""
        now = time.perf_counter()
        if now - self._store_read_at >= self._store_every:
            self._store_read_at = now
            self._store_bytes = self._read_object_store()
        return self._store_bytes

    def _read_object_store(self) -> int | None:
        if not self._want_store or self.store_error is not None:
            return None
        ray = sys.modules.get("ray")
        if ray is None or not ray.is_initialized():
            return None
        try:
            from ray._private import internal_api

            if self._store_state is None:
                address = ray.get_runtime_context().gcs_address
                self._store_state = internal_api.get_state_from_address(address)  # type: ignore[no-untyped-call]
            reply = internal_api.get_memory_info_reply(self._store_state, timeout_seconds=10.0)  # type: ignore[no-untyped-call]
            return int(reply.store_stats.object_store_bytes_used)
        except Exception as error:  # a private Ray API: any failure disables the probe, recorded
            self.store_error = f"{type(error).__name__}: {error}"
            return None


def process_pss(pid: int) -> int | None:
    """PSS of one process in bytes (``None`` if it exited or cannot be read)."""
    try:
        return int(psutil.Process(pid).memory_full_info().pss)
    except _MEMORY_ERRORS:
        return None


def processes_matching(markers: Sequence[str]) -> set[int]:
    """Pids of processes whose command line contains any of ``markers``."""
    found: set[int] = set()
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info.get("cmdline") or ())
        if any(marker in cmdline for marker in markers):
            found.add(process.info["pid"])
    return found


def _ray_session_markers() -> tuple[str, ...]:
    """The session folder of the Ray this process runs (every Ray process names it)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return ()
    try:
        node = ray._private.worker._global_node
        return (node.get_session_dir_path(),) if node is not None else ()
    except AttributeError:  # joined an external cluster: descendants and markers still count
        return ()
