"""What every workload command shares: its options, running the chosen systems, the result, re-rendering.

A workload module (``enron``, ``medical``, ``reviews``) adds its own options to
:func:`workload_parser`, writes a ``body`` that calls :func:`start`, prepares the workload, calls
:func:`run_workload` and returns ``WorkloadRun.result``; its ``main`` returns :func:`rerendered`
when ``--rerender`` asked for a section rebuilt from the stored rows, else the harness's
``run_benchmark`` of that body.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso
from benchmarks.workloads.compare import Scorer, merge_rows, previous_rows, run_all, select_runs
from benchmarks.workloads.definitions import PreparedWorkload
from benchmarks.workloads.report import rerender


def workload_parser(name: str, description: str, *, systems: str, seed: int, timeout: float) -> argparse.ArgumentParser:
    """The harness's options plus those every workload takes, with this workload's defaults.

    >>> args = workload_parser("x", "x", systems="semray", seed=3, timeout=60.0).parse_args(["--merge"])
    >>> (args.systems, args.seed, args.latency_scale, args.timeout, args.merge, args.rerender)
    ('semray', 3, 1.0, 60.0, True, False)
    """
    parser = benchmark_parser(name, description)
    parser.add_argument("--systems", default=systems, help="comma-separated systems to run (system or system:config)")
    parser.add_argument("--seed", type=int, default=seed, help="the seed of the data and of the simulator's errors")
    parser.add_argument("--latency-scale", type=float, default=1.0, help="scale the simulated latencies (0: none)")
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds one system's run may take")
    parser.add_argument(
        "--merge", action="store_true", help="keep the stored rows of systems not run now (rerun one system)"
    )
    parser.add_argument("--rerender", action="store_true", help="rebuild the section from the stored rows, run nothing")
    return parser


@dataclass(frozen=True, slots=True)
class WorkloadRun:
    """One invocation of a workload: its name, the command that reproduces it, when it started and the load then."""

    name: str
    command: str
    started_at: str
    load_before: list[float]

    def result(self, title: str, parameters: dict[str, Any], figures: dict[str, Any], markdown: str) -> BenchmarkResult:
        return BenchmarkResult(
            name=self.name,
            title=title,
            command=self.command,
            parameters=parameters,
            figures=figures,
            markdown=markdown,
            started_at=self.started_at,
            load_before=self.load_before,
        )


def start(name: str, command: str) -> WorkloadRun:
    """Note the start time and load; the command names the module where it lives (``benchmarks.workloads.NAME``).

    >>> start("enron", "python -m benchmarks.enron --merge").command
    'python -m benchmarks.workloads.enron --merge'
    """
    started, load = now_iso(), load_average()
    return WorkloadRun(name, command.replace(f"benchmarks.{name}", f"benchmarks.workloads.{name}", 1), started, load)


def run_workload(
    args: argparse.Namespace,
    name: str,
    workload: PreparedWorkload,
    score: Scorer,
    extra: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every system ``--systems`` names, in table order; with ``--merge``, the stored rows of the others kept."""
    rows = run_all(workload, select_runs(args.systems.split(",")), args.out_dir, score, args.timeout, extra)
    if args.merge:
        rows = merge_rows(previous_rows(args.results_dir, name), rows)
    return rows


def skip_steps(args: argparse.Namespace) -> list[str]:
    """The steps ``--skip`` leaves out.

    >>> skip_steps(argparse.Namespace(skip="self_join,,sql_aggregate"))
    ['self_join', 'sql_aggregate']
    """
    return [step for step in args.skip.split(",") if step]


def rerendered(
    name: str, parser: argparse.ArgumentParser, argv: Sequence[str] | None, render: Callable[[dict[str, Any]], str]
) -> int | None:
    """With ``--rerender``: rebuild the section from the stored rows and return the exit status; else None.

    Each workload's ``main`` then hands its body to the harness itself (``semray bench`` knows a
    benchmark by that call).
    """
    args = parser.parse_args(argv)
    return rerender(args.results_dir, name, render) if args.rerender else None
