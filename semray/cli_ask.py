"""``semray ask "question"``: plan a question with the agents, validate it, run it.

Registered on the ``semray`` parser by ``add_ask_command(commands)``. Datasets come from
``--table NAME=PATH`` (profiled on the spot). Planning needs a real LLM tier in the model
profile; with only simulated tiers it refuses (``semray models`` shows how to configure one),
unless ``--replay FILE`` gives recorded answers. Without ``--table`` the datasets come from the
catalog (``semray catalog add``); long-term memory is the catalog's memory table, or the JSON file
of ``--memory-file FILE``.

Each ask prints its id first (``ask ID: ...``) and journals its steps: an interrupted ask goes on
where it stopped, without paying again for its committed steps, when the same command is run
again or with ``semray ask --resume ID`` (which reads the question, datasets and flags from the
journal); ``semray runs show ID`` prints its trace.

    semray ask "average rating per product" -t reviews=reviews.csv -t products=products.csv --dry-run
    semray ask --resume 20261202-034501-a1b2c3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from semray.errors import SemrayError
from semray.settings import Settings

EXIT_FAILED_REFLECTION = 1
"""``semray ask``'s exit code when its answer failed reflection after the last draft (2: an error)."""


def add_ask_command(subparsers: Any) -> None:
    """Add ``ask`` to the ``semray`` command's subparsers."""
    ask = subparsers.add_parser(
        "ask",
        help="answer a question in plain language: plan, validate, run (an interrupted ask resumes: --resume ID)",
    )
    ask.add_argument("question", nargs="?", help="the question (not with --resume, which reads it from the journal)")
    ask.add_argument(
        "--resume",
        metavar="ID",
        help="go on with the interrupted ask ID (printed when it started; see `semray runs show ID`) with its "
        "question, datasets and flags, paying nothing again for its committed steps",
    )
    ask.add_argument("--table", "-t", action="append", default=[], metavar="NAME=PATH", help="a dataset (repeatable)")
    ask.add_argument("--dry-run", action="store_true", help="stop after a validated plan (printed as JSON)")
    ask.add_argument("--explain", action="store_true", help="also show every agent step with tokens and dollars")
    ask.add_argument("--max-cost", type=float, metavar="D", help="stop planning once its steps cost D dollars")
    ask.add_argument("--replay", type=Path, metavar="FILE", help="answer the agent steps from recorded answers")
    ask.add_argument(
        "--max-iterations",
        type=int,
        help="drafts before giving up, at most agent_max_retries + 1 (default: that limit, 3)",
    )
    ask.add_argument("--judges", type=int, default=3, help="semantic judgements per draft, majority wins (default 3)")
    ask.add_argument(
        "--memory-file", type=Path, metavar="FILE", help="keep long-term memory in this JSON file, not the catalog"
    )
    ask.add_argument(
        "--no-skills",
        action="store_true",
        help="plan the question even when a stored skill (a plan of a similar question that was validated and "
        "ran) fits it, and store no skill",
    )
    ask.add_argument(
        "--candidates",
        type=int,
        metavar="N",
        help="competitive sub-agents: N candidate drafts per attempt, drafted at once, the cheapest valid one wins "
        "(default: agent_candidates, 1)",
    )
    ask.add_argument(
        "--collaborators",
        type=int,
        metavar="N",
        help="collaborative sub-agents: a repair of problems at several places of a draft is shared among up to N, "
        "each on its own branch of the draft, merged (default: agent_collaborators, 1)",
    )
    ask.add_argument(
        "--dataset-agents",
        type=int,
        metavar="N",
        help="independent sub-agents: the best N candidate datasets each read by a profiling sub-agent of its own, "
        "at once (default: agent_dataset_agents, 0: one choice over all)",
    )
    ask.add_argument(
        "--topic-pruning",
        action="store_true",
        help="prune a semantic filter on one topic of an organised catalogued collection to the documents labelled "
        "with it (fewer model calls; a relevant document labelled otherwise is dropped unseen: docs/catalog.md)",
    )
    ask.add_argument("--plan-out", type=Path, metavar="FILE", help="write the validated plan here (for semray run)")
    ask.add_argument("--format", default="table", choices=("table", "csv", "json", "parquet"))
    ask.add_argument("--output", "-o", type=Path, help="write the answer to this file")
    ask.set_defaults(command=run_ask)


def run_ask(args: argparse.Namespace, settings: Settings) -> int:
    from semray.asking import ask, loop_config
    from semray.output import render, without_row_ids
    from semray.planner.agents import ListMemory

    if args.resume is not None:
        _resumed_arguments(args, settings)
    elif not args.question:
        raise SemrayError("semray ask needs a question, or --resume ID to go on with an interrupted ask")
    if args.topic_pruning:
        settings = settings.model_copy(update={"topic_pruning": True})
    tables: dict[str, Path] = {}
    for name, _, path in map(_split, args.table):
        tables[name] = Path(path)
    settings = settings.model_copy(update=_subagents(args))
    config = loop_config(settings, max_iterations=args.max_iterations, judges=args.judges, skills=not args.no_skills)
    started: list[str] = []

    def announce(ask_id: str, resumed: bool) -> None:
        started.append(ask_id)
        how = "resumed from its journal" if resumed else "journaled"
        sys.stderr.write(f"ask {ask_id}: {how}; if interrupted, go on with: semray ask --resume {ask_id}\n")

    try:
        result = ask(
            args.question,
            tables=tables,
            memory=None if args.memory_file is None else ListMemory(args.memory_file),
            settings=settings,
            replay=args.replay,
            dry_run=args.dry_run,
            max_cost=args.max_cost,
            config=config,
            resume=args.resume,
            arguments=_journaled_arguments(args),
            on_start=announce,
        )
    except SemrayError as error:
        if started and _unfinished(settings, started[0]):
            sys.stderr.write(
                f"ask {started[0]} stopped before it finished: fix the cause below, then go on with "
                f"`semray ask --resume {started[0]}` (its committed steps are not paid again)\n"
            )
        raise error
    if args.plan_out is not None:
        args.plan_out.write_text(result.plan_json + "\n", encoding="utf-8")
    if args.explain:
        lines = [step.line() + ("  (replayed)" if step.replayed else "") for step in result.steps]
        sys.stderr.write("agent steps:\n" + "\n".join(lines) + "\n")
    if args.dry_run or args.explain:
        sys.stdout.write(result.plan_json + "\n")
    if result.answer is not None:
        render(without_row_ids(result.answer), args.format, args.output)
    replayed = sum(step.replayed for step in result.steps)
    drafts = f"{result.iterations} draft(s)" if result.skill is None else f"the skill of {result.skill!r} reused"
    summary = (
        f"datasets: {', '.join(result.datasets)}; {drafts}, {len(result.steps)} agent steps"
        + (f" ({replayed} replayed from the journal, not paid again)" if replayed else "")
        + f", {result.planning_tokens:,} tokens, ${result.planning_dollars:.4f} planning; ask {result.ask_id}"
    )
    run = f"; run {result.run_id}: {result.usage_line}" if result.run_id else ""
    sys.stderr.write(summary + run + "\n")
    warning = result.warning()
    if warning:
        sys.stderr.write(warning + "\n")
    # An answer that failed reflection is shown, but the exit code says it is not a clean success.
    return EXIT_FAILED_REFLECTION if result.failed_reflection else 0


def _subagents(args: argparse.Namespace) -> dict[str, int]:
    """The sub-agent flags given, as the settings they override."""
    given = {
        "agent_candidates": args.candidates,
        "agent_collaborators": args.collaborators,
        "agent_dataset_agents": args.dataset_agents,
    }
    for name, value in given.items():
        if value is not None and value < (0 if name == "agent_dataset_agents" else 1):
            flag = "--" + name.removeprefix("agent_").replace("_", "-")
            raise SemrayError(f"{flag} is {value}; give at least {0 if name == 'agent_dataset_agents' else 1}")
    return {name: value for name, value in given.items() if value is not None}


def _split(item: str) -> tuple[str, str, str]:
    name, equals, path = item.partition("=")
    if not equals or not name or not path:
        raise SemrayError(f"--table takes NAME=PATH, got {item!r}")
    return name, equals, path


def _journaled_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The flags a resume by id needs again (``--replay`` is journaled by ``ask`` itself)."""
    return {
        "table": [f"{name}={Path(path).expanduser().absolute()}" for name, _, path in map(_split, args.table)],
        "dry_run": args.dry_run,
        "max_iterations": args.max_iterations,
        "judges": args.judges,
        "no_skills": args.no_skills,
        "topic_pruning": args.topic_pruning,
        "candidates": args.candidates,
        "collaborators": args.collaborators,
        "dataset_agents": args.dataset_agents,
        "memory_file": None if args.memory_file is None else str(args.memory_file.expanduser().absolute()),
    }


def _resumed_arguments(args: argparse.Namespace, settings: Settings) -> None:
    """Fill ``args`` from the journal of ask ``args.resume``; ``--replay`` given now wins over the journaled one."""
    from semray.planner.agents.ask_journal import ask_started

    started = ask_started(settings.state_path, args.resume)
    if args.question and args.question != started.question:
        raise SemrayError(
            f"ask {args.resume} asked {started.question!r}; --resume reads the question from its journal, "
            "so leave the question out (or ask it anew without --resume)"
        )
    journaled = started.arguments
    args.question = started.question
    args.table = [str(item) for item in journaled.get("table", args.table)]
    args.dry_run = bool(journaled.get("dry_run", args.dry_run))
    drafts = journaled.get("max_iterations", args.max_iterations)
    args.max_iterations = None if drafts is None else int(drafts)
    args.judges = int(journaled.get("judges", args.judges))
    args.no_skills = bool(journaled.get("no_skills", args.no_skills))
    args.topic_pruning = bool(journaled.get("topic_pruning", args.topic_pruning))
    for name in ("candidates", "collaborators", "dataset_agents"):
        if journaled.get(name) is not None:
            setattr(args, name, int(journaled[name]))
    if journaled.get("memory_file"):
        args.memory_file = Path(str(journaled["memory_file"]))
    if args.replay is None and journaled.get("replay"):
        args.replay = Path(str(journaled["replay"]))


def _unfinished(settings: Settings, ask_id: str) -> bool:
    from semray.planner.agents.ask_journal import ask_folder, ask_status

    folder = ask_folder(settings.state_path, ask_id)
    return folder is not None and ask_status(folder) in ("interrupted", "running")
