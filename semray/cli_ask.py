"""``semray ask "question"``: plan a question with the agents, validate it, run it.

Registered on the ``semray`` parser by ``add_ask_command(commands)``. Datasets come from
``--table NAME=PATH`` (profiled on the spot). Planning needs a real LLM tier in the model
profile; with only simulated tiers it refuses (``semray models`` shows how to configure one),
unless ``--replay FILE`` gives recorded answers. Without ``--table`` the datasets come from the
catalog (``semray catalog add``); long-term memory is the catalog's memory table, or the JSON file
of ``--memory-file FILE``.

    semray ask "average rating per product" -t reviews=reviews.csv -t products=products.csv --dry-run
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from semray.errors import SemrayError
from semray.settings import Settings


def add_ask_command(subparsers: Any) -> None:
    """Add ``ask`` to the ``semray`` command's subparsers."""
    ask = subparsers.add_parser("ask", help="answer a question in plain language: plan, validate, run")
    ask.add_argument("question")
    ask.add_argument("--table", "-t", action="append", default=[], metavar="NAME=PATH", help="a dataset (repeatable)")
    ask.add_argument("--dry-run", action="store_true", help="stop after a validated plan (printed as JSON)")
    ask.add_argument("--explain", action="store_true", help="also show every agent step with tokens and dollars")
    ask.add_argument("--max-cost", type=float, metavar="D", help="stop planning once its steps cost D dollars")
    ask.add_argument("--replay", type=Path, metavar="FILE", help="answer the agent steps from recorded answers")
    ask.add_argument("--max-iterations", type=int, default=4, help="drafts before giving up (default 4)")
    ask.add_argument("--judges", type=int, default=3, help="semantic judgements per draft, majority wins (default 3)")
    ask.add_argument(
        "--memory-file", type=Path, metavar="FILE", help="keep long-term memory in this JSON file, not the catalog"
    )
    ask.add_argument("--plan-out", type=Path, metavar="FILE", help="write the validated plan here (for semray run)")
    ask.add_argument("--format", default="table", choices=("table", "csv", "json", "parquet"))
    ask.add_argument("--output", "-o", type=Path, help="write the answer to this file")
    ask.set_defaults(command=run_ask)


def run_ask(args: argparse.Namespace, settings: Settings) -> int:
    from semray.asking import ask
    from semray.output import render, without_row_ids
    from semray.planner.agents import ListMemory, LoopConfig

    tables: dict[str, Path] = {}
    for item in args.table:
        name, equals, path = item.partition("=")
        if not equals or not name or not path:
            raise SemrayError(f"--table takes NAME=PATH, got {item!r}")
        tables[name] = Path(path)
    config = LoopConfig(max_iterations=args.max_iterations, judges=args.judges)
    result = ask(
        args.question,
        tables=tables,
        memory=None if args.memory_file is None else ListMemory(args.memory_file),
        settings=settings,
        replay=args.replay,
        dry_run=args.dry_run,
        max_cost=args.max_cost,
        config=config,
    )
    if args.plan_out is not None:
        args.plan_out.write_text(result.plan_json + "\n", encoding="utf-8")
    if args.explain:
        lines = [step.line() for step in result.steps]
        sys.stderr.write("agent steps:\n" + "\n".join(lines) + "\n")
    if args.dry_run or args.explain:
        sys.stdout.write(result.plan_json + "\n")
    if result.answer is not None:
        render(without_row_ids(result.answer), args.format, args.output)
    summary = (
        f"datasets: {', '.join(result.datasets)}; {result.iterations} draft(s), {len(result.steps)} agent steps, "
        f"{result.planning_tokens:,} tokens, ${result.planning_dollars:.4f} planning; ask {result.ask_id}"
    )
    run = f"; run {result.run_id}: {result.usage_line}" if result.run_id else ""
    sys.stderr.write(summary + run + "\n")
    return 0
