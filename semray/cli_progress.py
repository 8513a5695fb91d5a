"""How the CLI shows a run's progress and cost: a rich progress bar on a terminal, log lines elsewhere.

``reporter_for(settings)`` is what ``semray sql`` / ``semray run`` / ``semray runs resume`` pass
to the run (``semray.pipeline.runs.progress.ProgressReporter``); ``semray runs watch ID`` draws the
same bar from another shell. ``ingest_reporter_for(settings)`` is what ``semray catalog add`` /
``refresh`` pass to the ingest (``semray.catalog.ingest_progress``): files done of the total,
segments, embeddings/s, ETA.
"""

from __future__ import annotations

import sys
from typing import Any

from semray.catalog.ingest_progress import IngestLogReporter, IngestProgress, IngestReporter
from semray.pipeline.runs.progress import LogReporter, ProgressReporter, RunProgress, format_seconds
from semray.settings import Settings


class BarReporter:
    """A rich progress bar on standard error: rows done of the estimate, calls, dollars of the
    estimated cost, ETA (rows, calls and dollars alone when the run has no estimate)."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console

        self.console = console if console is not None else Console(stderr=True)
        self._bar: Any = None
        self._task: Any = None

    def update(self, progress: RunProgress, eta_s: float | None) -> None:
        if self._bar is None:
            self._start(progress)
        total = progress.rows_expected or None
        done = min(progress.rows_done, total) if total else progress.rows_done
        self._bar.update(self._task, total=total, completed=done, detail=detail(progress, eta_s))

    def close(self, progress: RunProgress) -> None:
        if self._bar is None:
            return
        self._bar.update(self._task, detail=detail(progress, None))
        self._bar.stop()
        self._bar = None

    def _start(self, progress: RunProgress) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._bar = Progress(
            TextColumn("run {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("rows  {task.fields[detail]}"),
            console=self.console,
            transient=False,
        )
        self._task = self._bar.add_task(progress.run_id, total=progress.rows_expected or None, detail="")
        self._bar.start()


def detail(progress: RunProgress, eta_s: float | None) -> str:
    """``12 calls, $0.0012 of ~$0.0400, ETA 1m05s``."""
    text = f"{progress.usage.calls} calls, ${progress.usage.dollars:.4f}"
    if progress.dollars_expected is not None:
        text += f" of ~${progress.dollars_expected:.4f}"
    if eta_s is not None:
        text += f", ETA {format_seconds(eta_s)}"
    return text


def reporter_for(settings: Settings, terminal: bool | None = None) -> ProgressReporter:
    """The bar when standard error is a terminal (Ray Data's own bars then stay off, so the two
    do not collide), else ``run_progress`` lines every ``progress_interval_s`` at warning level,
    so they show under the CLI's default log level."""
    if terminal if terminal is not None else sys.stderr.isatty():
        from semray.cluster.connect import leave_terminal_to_semray

        leave_terminal_to_semray()
        return BarReporter()
    return LogReporter(settings.progress_interval_s, level="warning")


class IngestBar:
    """A rich progress bar on standard error: files done of the total, segments, embeddings/s, ETA."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console

        self.console = console if console is not None else Console(stderr=True)
        self._bar: Any = None
        self._task: Any = None

    def update(self, progress: IngestProgress) -> None:
        if self._bar is None:
            self._start(progress)
        self._bar.update(
            self._task, total=progress.files_total, completed=progress.files_done, detail=ingest_detail(progress)
        )

    def close(self, progress: IngestProgress) -> None:
        if self._bar is None:
            return
        self.update(progress)
        self._bar.stop()
        self._bar = None

    def _start(self, progress: IngestProgress) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._bar = Progress(
            TextColumn("ingest {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("files  {task.fields[detail]}"),
            console=self.console,
            transient=False,
        )
        self._task = self._bar.add_task(progress.server, total=progress.files_total, detail="")
        self._bar.start()


def ingest_detail(progress: IngestProgress) -> str:
    """``1000 segments, 100.0 embeddings/s, ETA 30s``; ``publishing`` (and no ETA) once every file is read.

    >>> ingest_detail(IngestProgress("notes", files_done=250, files_total=1000, segments=1000, elapsed_s=10.0))
    '1000 segments, 100.0 embeddings/s, ETA 30s'
    """
    text = f"{progress.segments} segments"
    rate, eta = progress.embeddings_per_s, progress.eta_s
    if rate is not None:
        text += f", {rate:.1f} embeddings/s"
    if eta is not None:
        text += f", ETA {format_seconds(eta)}"
    elif progress.phase != "reading":
        text += f", {progress.phase}"
    return text


def ingest_reporter_for(settings: Settings, terminal: bool | None = None) -> IngestReporter:
    """The ingest's bar when standard error is a terminal (Ray Data's bars then stay off), else
    ``catalog_ingest_progress`` lines every ``progress_interval_s`` at warning level (shown under the CLI's
    default log level), as for runs (``reporter_for``)."""
    if terminal if terminal is not None else sys.stderr.isatty():
        from semray.cluster.connect import leave_terminal_to_semray

        leave_terminal_to_semray()
        return IngestBar()
    return IngestLogReporter(settings.progress_interval_s, level="warning")


def add_budget(parser: Any) -> None:
    """``--max-cost DOLLARS`` on a command that runs a query (``Settings.max_cost``)."""
    parser.add_argument(
        "--max-cost",
        type=_dollars,
        metavar="DOLLARS",
        help="budget for the run's model calls: refuse a plan estimated over it, stop the run between batches "
        "before its projected cost passes it (resumable: semray runs resume ID --max-cost HIGHER)",
    )


def with_budget(query: Any, args: Any) -> Any:
    """``query`` with ``--max-cost`` as its settings' budget (unchanged without the flag)."""
    if getattr(args, "max_cost", None) is None:
        return query
    return query.with_settings(query.settings.model_copy(update={"max_cost": args.max_cost}))


def _dollars(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a budget in dollars above 0, e.g. 2.50")
    return value
