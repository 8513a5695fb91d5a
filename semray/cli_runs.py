"""``semray runs ls|show ID|watch ID|resume ID|cancel ID``: journaled runs, their progress, cost and errors.

Registered on the ``semray`` parser by ``add_runs_commands(commands)``; every command has the
``(args, settings) -> exit code`` shape that ``semray.cli.main`` dispatches, and raises
``SemrayError`` subclasses (printed as ``error: ...``) for unknown runs or refused resumes.
"""

from __future__ import annotations

import argparse
import io
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from semray.cli_progress import add_budget, reporter_for
from semray.settings import Settings

if TYPE_CHECKING:
    from semray.transactions import LLMUsage, RunDetail, RunSummary

WIDTH = 160
MESSAGE_CHARS = 240
RUN_COLUMNS = (
    "run",
    "status",
    "att.",
    "started",
    "output",
    "progress",
    "calls",
    "dollars",
    "errors",
    "failed rows",
    "last activity",
)


def add_runs_commands(subparsers: Any) -> None:
    """Add ``runs`` and its actions to the ``semray`` command's subparsers."""
    runs = subparsers.add_parser("runs", help="list, inspect, resume and cancel journaled runs")
    actions = runs.add_subparsers(title="actions", required=True, metavar="ACTION")

    listing = actions.add_parser("ls", help="runs, newest first: status, progress, cost so far, errors")
    listing.add_argument("--limit", type=int, default=20, help="show at most this many runs (default 20; 0: all)")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    listing.set_defaults(command=list_command)

    show = actions.add_parser(
        "show", help="one run: plan, per-operator progress and cost, errors; or one ask: its units and attempts"
    )
    show.add_argument("run_id", metavar="ID")
    show.add_argument("--format", choices=("table", "json"), default="table")
    show.set_defaults(command=show_command)

    resume = actions.add_parser("resume", help="finish an interrupted, failed or cancelled run without paying twice")
    resume.add_argument("run_id", metavar="ID")
    resume.add_argument(
        "--format", choices=("table", "csv", "json"), default="table", help="rows of a run without an output file"
    )
    resume.add_argument("--output", "-o", type=Path, help="write those rows to this file instead of standard output")
    add_budget(resume)
    resume.set_defaults(command=resume_command)

    watch = actions.add_parser(
        "watch",
        help="follow a run from another shell until it ends: progress, calls, dollars, ETA; the exit code is its end "
        "(0 succeeded, 1 failed, 3 cancelled or stopped at its budget, 4 interrupted)",
    )
    watch.add_argument("run_id", metavar="ID")
    watch.add_argument("--interval", type=float, default=1.0, help="seconds between reads of its journal (default 1)")
    watch.set_defaults(command=watch_command)

    cancel = actions.add_parser("cancel", help="stop a run between batches (a stopped run is marked cancelled)")
    cancel.add_argument("run_id", metavar="ID")
    cancel.set_defaults(command=cancel_command)


def list_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.transactions import list_runs

    summaries = list_runs(settings)
    shown = summaries[: args.limit] if args.limit > 0 else summaries
    if args.format == "json":
        _write("".join(summary.model_dump_json() + "\n" for summary in shown))
        return 0
    asks = _asks(settings, args.limit)
    if not shown and not asks:
        _write(f"no runs under {settings.state_path / 'runs'}\n")
        return 0
    if shown:
        _write(render_runs(shown))
    if len(shown) < len(summaries):
        _write(f"... {len(summaries) - len(shown)} older runs (use --limit 0 for all)\n")
    if asks:
        _write(("\n" if shown else "") + "asks (`semray runs show ID` for the trace):\n")
        for ask in asks:
            hint = f"  (go on with: semray ask --resume {ask.ask_id})" if ask.status == "interrupted" else ""
            question = ask.question if len(ask.question) <= 60 else ask.question[:57] + "..."
            _write(f"{ask.ask_id}  {ask.status:<11}  {ask.started:%Y-%m-%d %H:%M:%S}  {question}{hint}\n")
    return 0


def _asks(settings: Settings, limit: int) -> list[Any]:
    """The newest ``limit`` asks (all when ``limit`` <= 0), listed after the runs in text output."""
    from semray.planner.agents.ask_journal import list_asks

    asks = list_asks(settings.state_path)
    return asks[:limit] if limit > 0 else asks


def show_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.transactions import show_run

    if _show_ask(args, settings):
        return 0
    detail = show_run(settings, args.run_id)
    if args.format == "json":
        _write(detail.model_dump_json(indent=2) + "\n")
        return 0
    _write(render_detail(detail))
    return 0


def resume_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.output import render
    from semray.pipeline.runs.execute import Written, resume

    _refuse_ask(args.run_id, settings)
    if args.max_cost is not None:
        settings = settings.model_copy(update={"max_cost": args.max_cost})
    result = resume(settings, args.run_id, progress=reporter_for(settings))
    if isinstance(result, Written):
        _say(f"run {result.run_id}: published {result.rows} rows to {result.path} (version {result.version})\n")
    else:
        table = result.table
        if "_rowid" in table.column_names:
            table = table.drop_columns(["_rowid"])
        render(table, args.format, args.output)
    if line := result.failed_line():
        _say(line + "\n")
    _say(result.usage_line() + "\n")
    return 0


WATCH_EXIT_CODES = {"succeeded": 0, "failed": 1, "cancelled": 3, "interrupted": 4}


def watch_command(args: argparse.Namespace, settings: Settings) -> int:
    """Follow a run's journal until the run ends; its end state is the exit code (``WATCH_EXIT_CODES``)."""
    import time

    from semray.pipeline.runs.progress import JournalTail, LogReporter, ProgressClock, StoreTail
    from semray.transactions import show_run
    from semray.transactions.registry import run_dir, store_holding

    store = store_holding(settings, args.run_id)  # run elsewhere: follow the copy its driver pushes
    tail = StoreTail(store, args.run_id) if store is not None else JournalTail(run_dir(settings, args.run_id))
    reporter = reporter_for(settings) if sys.stderr.isatty() else LogReporter(max(args.interval, 0.1), "warning")
    clock = ProgressClock()
    while True:
        progress = tail.poll()
        reporter.update(progress, clock.eta_s(progress))
        if progress.finished or not tail.driver_alive():
            break
        time.sleep(max(args.interval, 0.1))
    progress = tail.poll()  # what the driver wrote last, before it let go of the run
    reporter.close(progress)
    status = show_run(settings, args.run_id).status  # "interrupted": it ended with no final status
    _say(f"run {args.run_id} {status}" + (f": {progress.message}" if progress.message else "") + "\n")
    _say(f"{progress.line()}\n")
    return WATCH_EXIT_CODES.get(status, 1)


def cancel_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.transactions import cancel_run, show_run

    before = show_run(settings, args.run_id).status
    if before in ("succeeded", "failed", "cancelled"):
        _write(f"run {args.run_id} already {before}; nothing to cancel\n")
        return 0
    if cancel_run(settings, args.run_id) == "running":
        _write(f"cancel requested: run {args.run_id} stops after the batches in flight\n")
    else:
        _write(f"run {args.run_id} cancelled\n")
    return 0


def _show_ask(args: argparse.Namespace, settings: Settings) -> bool:
    """``runs show ID`` of an ask (``semray ask``): its trace of units and attempts; False for a run id."""
    from semray.planner.agents.ask_journal import ask_folder, read_ask_trace, render_ask_trace

    folder = ask_folder(settings.state_path, args.run_id)
    if folder is None:
        return False
    if args.format == "json":
        _write("".join(record.model_dump_json() + "\n" for record in read_ask_trace(folder)))
    else:
        _write(render_ask_trace(folder) + "\n")
    return True


def _refuse_ask(run_id: str, settings: Settings) -> None:
    from semray.errors import SemrayError
    from semray.planner.agents.ask_journal import ask_folder

    if ask_folder(settings.state_path, run_id) is not None:
        raise SemrayError(f"{run_id} is an ask, not a run: go on with it with `semray ask --resume {run_id}`")


# rendering ------------------------------------------------------------------------------


def render_runs(summaries: list[RunSummary]) -> str:
    """The ``runs ls`` table, e.g. ``render_runs(list_runs(settings))``."""
    from rich.table import Table

    view = Table(show_lines=False)
    for name in RUN_COLUMNS:
        view.add_column(name, overflow="fold")
    for summary in summaries:
        view.add_row(
            summary.run_id,
            summary.status,
            str(summary.attempts),
            _time(summary.started_at),
            summary.output or "(in memory)",
            _progress(summary),
            str(summary.usage.calls),
            f"{summary.usage.dollars:.4f}",
            str(summary.error_count),
            str(summary.rows_failed),
            _ago(summary.last_activity_at),
        )
    return _print(view) + f"({len(summaries)} runs)\n"


def render_detail(detail: RunDetail) -> str:
    """The ``runs show ID`` text: summary, operators, errors and the physical plan."""
    from rich.table import Table

    facts = Table(show_header=False, show_lines=False, box=None)
    facts.add_column("field", style="bold")
    facts.add_column("value", overflow="fold")
    for field, value in _facts(detail):
        facts.add_row(field, value)
    parts = [_print(facts)]

    labels = _operator_labels(detail)
    operators = Table(title="operators (committed work)", show_lines=False)
    columns = ("operator", "batches", "rows in", "rows failed", "rows out", "calls", "tokens in/out", "dollars")
    for name in columns:
        operators.add_column(name, overflow="fold")
    for operator in detail.operators:
        key = operator.operator_key
        operators.add_row(
            f"{labels[key]} ({key})" if key in labels else key,
            str(operator.batches),
            str(operator.rows_in),
            str(operator.rows_failed),
            str(operator.rows_out),
            str(operator.usage.calls),
            f"{operator.usage.tokens_in}/{operator.usage.tokens_out}",
            f"{operator.usage.dollars:.4f}",
        )
    parts.append(_print(operators) if detail.operators else "no committed batches\n")
    failing = [operator for operator in detail.operators if operator.rows_failed]
    if failing:
        failed = Table(title="failed rows (no answer), by reason", show_lines=False)
        for name in ("operator", "reason", "rows", "of rows asked", "example"):
            failed.add_column(name, overflow="fold")
        for operator in failing:
            for reason in operator.failures:
                example = reason.example if len(reason.example) <= MESSAGE_CHARS else reason.example[:MESSAGE_CHARS]
                failed.add_row(
                    labels.get(operator.operator_key, operator.operator_key),
                    reason.reason,
                    str(reason.rows),
                    str(operator.rows_attempted),
                    example,
                )
        parts.append(_print(failed))

    if detail.errors:
        errors = Table(title="errors", show_lines=False)
        for name in ("at", "attempt", "type", "message", "operator"):
            errors.add_column(name, overflow="fold")
        for error in detail.errors:
            message = error.message if len(error.message) <= MESSAGE_CHARS else error.message[:MESSAGE_CHARS] + "..."
            errors.add_row(_time(error.at), str(error.attempt), error.error_type, message, error.operator_key or "")
        parts.append(_print(errors))
    physical = detail.config.get("physical_plan") if isinstance(detail.config, dict) else None
    if physical:
        parts.append("physical plan\n" + "\n".join("  " + line for line in str(physical).splitlines()) + "\n")
    return "\n".join(parts)


def _facts(detail: RunDetail) -> list[tuple[str, str]]:
    facts = [
        ("run", detail.run_id),
        ("status", detail.status + (" (cancel requested)" if detail.cancel_requested else "")),
        ("attempts", str(detail.attempts)),
        ("output", detail.output or "(rows returned to the caller)"),
        ("published version", detail.published_version or "-"),
        ("started", _time(detail.started_at)),
        ("ended", _time(detail.ended_at) if detail.ended_at else "-"),
        ("last activity", f"{_time(detail.last_activity_at)} ({_ago(detail.last_activity_at)})"),
        ("progress", _progress(detail)),
        ("cost so far", _usage(detail.usage)),
    ]
    if detail.batches_refused:
        # Workers of a killed attempt that went on after a resume began: paid, fenced off, not committed.
        refused = f"{_usage(detail.refused_usage)} in {detail.batches_refused} batches of older attempts"
        facts.append(("paid, not committed", refused + " (fenced off by a resume; not in cost so far)"))
    if detail.expected_dollars is not None:
        facts.append(("expected dollars", f"{detail.expected_dollars:.4f}"))
    facts.append(("errors", str(detail.error_count)))
    if detail.rows_failed:
        asked = sum(operator.rows_attempted for operator in detail.operators if operator.rows_failed)
        facts.append(("FAILED ROWS", f"{detail.rows_failed} of {asked} rows got no answer (see below)"))
    if detail.final_message:
        facts.append(("final message", detail.final_message))
    if isinstance(detail.config, dict) and detail.config.get("memory_sources"):
        facts.append(("note", "reads in-memory tables: resumable only in the process that started it"))
    if detail.skipped_journal_lines:
        facts.append(("journal", f"{detail.skipped_journal_lines} torn line(s) skipped"))
    facts.append(("plan fingerprint", detail.plan_fingerprint[:16]))
    return facts


def _operator_labels(detail: RunDetail) -> dict[str, str]:
    """Operator key -> its label, as the pipeline journaled them (empty for older runs)."""
    labels = detail.config.get("operator_labels") if isinstance(detail.config, dict) else None
    return {str(key): str(label) for key, label in labels.items()} if isinstance(labels, dict) else {}


def _progress(summary: RunSummary) -> str:
    text = f"{summary.batches_committed} batches, {summary.rows_committed} rows"
    if summary.expected_rows:
        share = min(1.0, summary.rows_committed / summary.expected_rows)
        text += f" of {summary.expected_rows} ({share:.0%})"
    return text


def _usage(usage: LLMUsage) -> str:
    return f"{usage.calls} calls, {usage.tokens_in}/{usage.tokens_out} tokens in/out, {usage.dollars:.4f} dollars"


def _time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _ago(moment: datetime, now: datetime | None = None) -> str:
    seconds = max(0, int(((now or datetime.now(UTC)) - moment).total_seconds()))
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    if seconds < 172800:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"


def _print(renderable: Any) -> str:
    from rich.console import Console

    buffer = io.StringIO()
    Console(file=buffer, width=WIDTH, force_terminal=False).print(renderable)
    return buffer.getvalue()


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _say(text: str) -> None:
    sys.stderr.write(text)
