"""The shared command line of every benchmark and the run wrapper that writes its results."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.harness.data import MissingData
from benchmarks.harness.results import BENCHMARKS_DIR, RESULTS_DIR, BenchmarkResult, write_result
from semray.errors import SemrayError

EXIT_MISSING_DATA = 2
EXIT_FAILED = 2


def benchmark_parser(name: str, description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark takes; add the benchmark's own."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=description)
    parser.add_argument(
        "--skip-if-missing",
        action="store_true",
        help="exit 0 with a message (instead of failing) when ../shared/data is absent",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS_DIR,
        help="where NAME.json goes; RESULTS.md is regenerated in its parent (default: benchmarks/results)",
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=BENCHMARKS_DIR / "out" / name,
        help="scratch folder for generated inputs and state, not committed (default: benchmarks/out/NAME)",
    )
    return parser


def command_line(name: str, argv: Sequence[str]) -> str:
    """The command that reproduces this run, e.g. ``python -m benchmarks.relational --rows 1000000``."""
    return " ".join(["python -m", f"benchmarks.{name}", *(shlex.quote(arg) for arg in argv)])


def run_benchmark(
    name: str,
    parser: argparse.ArgumentParser,
    body: Callable[[argparse.Namespace, str], BenchmarkResult],
    argv: Sequence[str] | None = None,
) -> int:
    """Parse ``argv``, run ``body(args, command)``, write its result; returns the exit status.

    A :class:`MissingData` raised by ``body`` prints its message and exits 0 under
    ``--skip-if-missing`` (2 otherwise); no result file is written, so earlier results stay.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(arguments)
    try:
        result = body(args, command_line(name, arguments))
    except MissingData as missing:
        verdict = "skipped" if args.skip_if_missing else "failed"
        print(f"benchmarks.{name} {verdict}: {missing}", file=sys.stderr)
        return 0 if args.skip_if_missing else EXIT_MISSING_DATA
    except SemrayError as error:  # e.g. a model endpoint that refuses: say why, write no result
        print(f"benchmarks.{name} failed: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_FAILED
    path = write_result(result, args.results_dir)
    print(f"benchmarks.{name}: wrote {path} and {path.parent.parent / 'RESULTS.md'}", file=sys.stderr)
    return 0
