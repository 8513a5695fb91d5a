"""An ingest's progress: files done of the total, segments embedded, embeddings/s, ETA.

``DocumentsIngest`` updates an ``IngestReporter`` after each pipeline batch it stages (and once
more when the ingest publishes, which builds the indexes). The CLI passes the bar of
``cli_progress.ingest_reporter_for`` on a terminal (Ray Data's own bars then stay off) and
``IngestLogReporter`` lines elsewhere; a library call logs ``catalog_ingest_progress`` lines at
info level every ``Settings.progress_interval_s``.

>>> progress = IngestProgress("notes", files_done=250, files_total=1000, segments=1000, elapsed_s=10.0)
>>> progress.embeddings_per_s, progress.eta_s
(100.0, 30.0)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from semray.log import get_logger

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class IngestProgress:
    """Where one ingest of server ``server`` stands; ``phase`` is ``reading`` then ``publishing``."""

    server: str
    files_done: int = 0
    """Documents read (or skipped) so far."""
    files_total: int = 0
    """Documents this ingest reads (the changed and new ones)."""
    segments: int = 0
    """Segments embedded and staged so far."""
    elapsed_s: float = 0.0
    phase: str = "reading"

    @property
    def embeddings_per_s(self) -> float | None:
        return self.segments / self.elapsed_s if self.elapsed_s > 0 else None

    @property
    def eta_s(self) -> float | None:
        """Seconds left to read, at the files' rate so far (None before the first file, or once read)."""
        if self.phase != "reading" or not self.files_done or self.elapsed_s <= 0:
            return None
        return (self.files_total - self.files_done) * self.elapsed_s / self.files_done


class IngestReporter(Protocol):
    """Shows an ingest's progress: ``update`` as it goes, ``close`` once, when it ends (either way)."""

    def update(self, progress: IngestProgress) -> None: ...

    def close(self, progress: IngestProgress) -> None: ...


class IngestLogReporter:
    """A ``catalog_ingest_progress`` line at most every ``interval_s`` seconds (0: none), at ``level``; the
    line of a new phase is never held back."""

    def __init__(self, interval_s: float, level: str = "info", now: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.level = level
        self.now = now
        self._last: float | None = None
        self._phase: str | None = None

    def update(self, progress: IngestProgress) -> None:
        if self.interval_s <= 0:
            return
        moment = self.now()
        if self._last is not None and moment - self._last < self.interval_s and progress.phase == self._phase:
            return
        self._last, self._phase = moment, progress.phase
        rate, eta = progress.embeddings_per_s, progress.eta_s
        getattr(log, self.level)(
            "catalog_ingest_progress",
            server=progress.server,
            phase=progress.phase,
            files_done=progress.files_done,
            files_total=progress.files_total,
            segments=progress.segments,
            embeddings_per_s=round(rate, 1) if rate is not None else None,
            eta_s=round(eta, 1) if eta is not None else None,
        )

    def close(self, progress: IngestProgress) -> None:
        del progress  # catalog_ingested (catalog/ingest.py) says how it ended


class IngestClock:
    """Builds an ingest's ``IngestProgress`` with the seconds since it started."""

    def __init__(self, server: str, files_total: int, now: Callable[[], float] = time.monotonic) -> None:
        self.server = server
        self.files_total = files_total
        self.now = now
        self.started = now()

    def progress(self, files_done: int, segments: int, phase: str = "reading") -> IngestProgress:
        return IngestProgress(self.server, files_done, self.files_total, segments, self.now() - self.started, phase)
