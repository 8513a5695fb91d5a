"""Shared benchmark machinery: timing, memory sampling, machine facts, results and RESULTS.md.

A benchmark module ``benchmarks/NAME.py`` builds a parser with :func:`benchmark_parser`,
measures with :class:`Stopwatch` / :class:`MemorySampler`, and returns a
:class:`BenchmarkResult` from a body function handed to :func:`run_benchmark`, which writes
``results/NAME.json`` and regenerates ``RESULTS.md``. See ``benchmarks/README.md``.
"""

from benchmarks.harness.cli import benchmark_parser, command_line, run_benchmark
from benchmarks.harness.data import MissingData, require_shared_data, shared_data_dir
from benchmarks.harness.environment import git_state, load_average, machine, package_versions
from benchmarks.harness.memory import MemoryPeak, MemorySample, MemorySampler, process_pss, processes_matching
from benchmarks.harness.results import BenchmarkResult, now_iso, regenerate_report, render_section, write_result
from benchmarks.harness.timing import Stopwatch, median, repeat, timed

__all__ = [
    "BenchmarkResult",
    "MemoryPeak",
    "MemorySample",
    "MemorySampler",
    "MissingData",
    "Stopwatch",
    "benchmark_parser",
    "command_line",
    "git_state",
    "load_average",
    "machine",
    "median",
    "now_iso",
    "package_versions",
    "process_pss",
    "processes_matching",
    "regenerate_report",
    "render_section",
    "repeat",
    "require_shared_data",
    "run_benchmark",
    "shared_data_dir",
    "timed",
    "write_result",
]
