"""The fault corpus tallied by family: how many bad inputs, how each ended, the slowest case.

Runs pytest over ``tests/faults/`` (one module per family of bad input: plan expressions that
try to read files, malformed source files, a misbehaving model endpoint, malformed plans and
SQL) and the fault tests that live beside their code (rows that get no answer, the simulator
on unlabelled rows, orphaned writers after a kill, Serve tiers that do not fit, a replica
killed mid-batch), without Ray, with a JUnit XML report, and counts per module: cases, passed
(a typed ``SemrayError`` naming the cause, or the documented correct result), failed, skipped,
known gaps (strict xfails, each naming the file to fix) and the slowest case's seconds (every
module has a pytest-timeout, so a hang fails).

    python -m benchmarks.faults
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso, run_benchmark

ROOT = Path(__file__).resolve().parent.parent
# The corpus proper, and the families whose cases live beside the code they test (none starts Ray).
CORPUS = (
    "tests/faults",
    "tests/pipeline/test_failed_rows.py",
    "tests/serving/test_simulator_labels.py",
    "tests/transactions/test_fencing.py",
    "tests/serving/test_tier_deploy_plan.py",
    "tests/serving/test_handle_retry_usage.py",
)

FAMILIES = {
    "test_expression_safety": "plan expressions that reach files or the session (security)",
    "test_sources_faults": "source contents: repeated, empty or case-folded names, late keys and types, open quotes",
    "test_source_file_faults": "source files: encodings, FIFOs, devices, link loops, empty and odd files",
    "test_endpoint_faults": "model endpoint: down, 401/404/429, slow, malformed bodies, impossible values",
    "test_cache_faults": "response cache: broken files are misses; what changes an answer changes the key",
    "test_plan_faults": "JSON plans: nesting, encodings, huge numbers, strict types, repeated keys, wrong top level",
    "test_plan_schema_faults": "JSON plans: source schemas (also against the source), options, output names, scores",
    "test_expression_limits": "plan expressions too long, with too many operators or nested too deep (all surfaces)",
    "test_sql_faults": "SQL: nesting, length and plan-depth limits, statements other than SELECT, score ranges",
    "test_failed_rows": "rows without an answer: counted, shown, failing the run past the threshold",
    "test_simulator_labels": "the simulator on unlabelled rows: a no_label row error, charged nothing",
    "test_fencing": "kills: an orphaned writer of an older attempt cannot commit or pay",
    "test_tier_deploy_plan": "Serve: tiers that do not fit, or whose deployed configuration differs",
    "test_handle_retry_usage": "a replica killed mid-batch: the retried calls are counted once",
    "test_replica_kill_usage": "a replica killed mid-batch: usage against what the model was paid for",
    "test_failed_run_console": "a run failed by a SemrayError: Ray Data's stack trace kept off the console",
}


def tally(report: Path) -> dict[str, dict[str, Any]]:
    """Cases per family from a JUnit XML report. A strict xfail is a known gap in code the corpus's
    owner does not own: counted apart from skips, its reason kept (it names the file to fix)."""
    families: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"cases": 0, "passed": 0, "failed": 0, "skipped": 0, "gaps": 0, "slowest_s": 0.0, "gap_reasons": []}
    )
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        module = str(case.get("classname", "")).rsplit(".", 1)[-1]
        family = families[module]
        family["cases"] += 1
        family["slowest_s"] = max(family["slowest_s"], float(case.get("time", 0.0)))
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            family["failed"] += 1
        elif skipped is not None and skipped.get("type") == "pytest.xfail":
            family["gaps"] += 1
            family["gap_reasons"].append(f"{case.get('name')}: {skipped.get('message', '')}")
        elif skipped is not None:
            family["skipped"] += 1
        else:
            family["passed"] += 1
    return dict(families)


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    started, load = now_iso(), load_average()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    report = args.out_dir / "faults.xml"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *CORPUS,
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not ray and not slow",
            f"--junitxml={report}",
        ],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
    )
    families = tally(report)
    rows = [
        f"| {FAMILIES.get(name, name)} | `{name}.py` | {f['cases']} | {f['passed']} | {f['failed']} | "
        f"{f['skipped']} | {f['gaps']} | {f['slowest_s']:.2f} |"
        for name, f in sorted(families.items())
    ]
    total = {key: sum(f[key] for f in families.values()) for key in ("cases", "passed", "failed", "skipped", "gaps")}
    gaps = [
        f"- `{name}.py::{case}`: {why}"
        for name, f in sorted(families.items())
        for case, _, why in (reason.partition(": ") for reason in f["gap_reasons"])
    ]
    heading = "Known gaps, each a strict xfail (it fails the corpus once fixed, and then becomes a plain case):"
    gap_lines = ["", heading, "", *gaps] if gaps else []
    markdown = "\n".join(
        [
            "Each case is one bad input; it passes when semray raises a typed `SemrayError` whose message names "
            "the cause (or gives the documented correct result) within the module's pytest-timeout, so a hang "
            "or a raw traceback is a failure. The corpus is `tests/faults/` plus the modules listed. The Ray "
            "tests of the same families (a run over unlabelled rows failing with its message, a read task's "
            "SourceError mid-run, SIGKILL and resume with fencing, tiers reused or refused) are in the test "
            "suite, not counted here.",
            "",
            "| family | module | cases | passed | failed | skipped | known gaps | slowest s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            *rows,
            f"| **all** | | {total['cases']} | {total['passed']} | {total['failed']} | {total['skipped']} | "
            f"{total['gaps']} | |",
            *gap_lines,
        ]
    )
    return BenchmarkResult(
        name="faults",
        title="Fault corpus: bad inputs by family, each a typed error that names its cause",
        command=command,
        parameters={"pytest_exit": completed.returncode},
        figures={"families": families, "total": total},
        markdown=markdown,
        started_at=started,
        load_before=load,
    )


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser("faults", "Tally the fault corpus (tests/faults) by family.")
    return run_benchmark("faults", parser, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
