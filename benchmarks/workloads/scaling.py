"""Scaling: one semantic filter over generated corpora of 10k, 100k and 1M rows, zero-latency models.

    .venv/bin/python -m benchmarks.workloads.scaling [--sizes 10000,100000,1000000] [--peer-max 10000]

semray runs every size; the peers (LOTUS, Palimpzest, plain configuration) run the sizes up to
``--peer-max``. The simulated models answer at once, so the figures are the systems' own
overhead: wall time, peak summed PSS (and Ray's object store for semray), and the simulator's
calls, tokens and dollars, which should grow linearly in rows. A size that does not finish
within ``--timeout`` seconds is recorded as such, with the largest size that did.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso, run_benchmark
from benchmarks.workloads.compare import SystemRun, previous_rows, run_all
from benchmarks.workloads.definitions import prepare_scaling
from benchmarks.workloads.report import GIB, fmt, gaps, rerender, versions_line
from benchmarks.workloads.scoring import precision_recall

NAME = "scaling"


def score(steps: dict[str, Any], truth: dict[str, Any]) -> dict[str, Any]:
    step = steps.get("filter")
    if not step:
        return {}
    return {"filter": precision_recall(step.get("kept", []), truth["urgent"]).to_dict()}


def runs_for(size: int, systems: Sequence[str], peer_max: int, peer_configs: Sequence[str]) -> list[SystemRun]:
    """semray at every size; each peer in each of ``peer_configs`` up to ``peer_max`` rows.

    >>> [r.label for r in runs_for(100, ["semray", "lotus"], 10, ["plain"])]
    ['semray (default)']
    """
    runs = [SystemRun("semray", "default")] if "semray" in systems else []
    if size <= peer_max:
        runs += [SystemRun(peer, config) for peer in systems if peer != "semray" for config in peer_configs]
    return runs


def merge_sizes(previous: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored rows with the (system, config, size) runs made now replaced, ordered by size then system.

    >>> [(r["rows"], r["system"]) for r in merge_sizes(
    ...     [{"system": "semray", "config": "default", "rows": 10}, {"system": "lotus", "config": "plain", "rows": 10}],
    ...     [{"system": "semray", "config": "default", "rows": 100}])]
    [(10, 'semray'), (10, 'lotus'), (100, 'semray')]
    """
    order = {"semray": 0, "lotus": 1, "palimpzest": 2}
    merged = {(r["system"], r["config"], r["rows"]): r for r in previous}
    merged |= {(r["system"], r["config"], r["rows"]): r for r in new}
    return sorted(merged.values(), key=lambda r: (r["rows"], order.get(r["system"], 9), r["config"]))


def too_slow(rows: Sequence[dict[str, Any]], system: str, size: int, budget_s: float) -> str | None:
    """Why ``system`` is not run at ``size``: its last finished size's rate says it would overrun the budget.

    >>> too_slow([{"system": "semray", "rows": 10, "wall_s": 10.0, "simulator": {}}], "semray", 1000, 60)
    'not run: at 1 rows/s (measured at 10 rows) 1,000 rows would take ~1000 s, over the 60 s budget'
    """
    timed_out = [
        r for r in rows if r["system"] == system and "timed out" in str(r.get("error", "")) and r["rows"] < size
    ]
    if timed_out:
        smallest = min(r["rows"] for r in timed_out)
        return f"not run: {system} timed out at {smallest:,} rows"
    finished = [r for r in rows if r["system"] == system and "simulator" in r and not r.get("error") and r["wall_s"]]
    if not finished:
        return None
    last = max(finished, key=lambda r: r["rows"])
    rate = last["rows"] / last["wall_s"]
    estimate = size / rate
    if estimate <= budget_s:
        return None
    return (
        f"not run: at {rate:.0f} rows/s (measured at {last['rows']:,} rows) {size:,} rows would take "
        f"~{estimate:.0f} s, over the {budget_s:.0f} s budget"
    )


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        'One `sem_filter` ("the ticket is urgent", 30% true) over generated unique ticket texts; zero-latency '
        "simulated models over HTTP on 127.0.0.1, so time is each system's own overhead. Memory: peak summed PSS "
        "of the system's process tree (semray: plus Ray's object store peak in brackets, already inside the PSS).",
        "",
        versions_line(rows),
        "",
        "| rows | system | F1 | calls | tokens | sim. $ | $ per 1k rows | wall s | rows/s "
        "| peak PSS GiB (object store) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        label = f"{row['system']} ({row['config']}{', in-process model' if row.get('serving') == 'inprocess' else ''})"
        if "simulator" not in row or row.get("error"):
            lines.append(f"| {row['rows']:,} | {label} | {row.get('error', 'did not run')} | | | | | | | |")
            continue
        sim = row["simulator"]
        f1 = (row.get("quality") or {}).get("filter", {}).get("f1")
        memory = f"{row['peak_pss_bytes'] / GIB:.2f}"
        if row.get("object_store_peak_bytes") is not None:
            memory += f" ({row['object_store_peak_bytes'] / GIB:.3f})"
        per_k = sim["cost_usd"] / row["rows"] * 1000 if row["rows"] else 0.0
        lines.append(
            f"| {row['rows']:,} | {label} | {fmt(f1)} | {sim['calls']:,} | {sim['tokens']:,} | {sim['cost_usd']:.4f} | "
            f"{per_k:.4f} | {row['wall_s']:.1f} | {row['rows'] / row['wall_s']:.0f} | {memory} |"
        )
    lines += ["", "Goals (issue 12), semray:", "", *scaling_goals(rows)]
    missing = gaps(rows)
    if missing:
        lines += ["", missing]
    return "\n".join(lines)


def scaling_goals(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Memory flat (within 2x) from 100k to 1M rows; cost linear in rows — for semray's finished runs."""
    done = sorted(
        (r for r in rows if r["system"] == "semray" and "simulator" in r and not r.get("error")),
        key=lambda r: r["rows"],
    )
    if not done:
        return ["- no finished semray run"]
    by_size = {r["rows"]: r for r in done}
    largest = done[-1]
    if 100_000 in by_size and largest["rows"] > 100_000:
        ratio = largest["peak_pss_bytes"] / by_size[100_000]["peak_pss_bytes"]
        verdict = "met" if ratio <= 2 and largest["rows"] >= 1_000_000 else "not shown" if ratio <= 2 else "NOT met"
        memory = (
            f"- memory flat from 100k to 1M (within 2x): peak PSS at {largest['rows']:,} rows is {ratio:.2f}x that at "
            f"100k — {verdict}" + ("" if largest["rows"] >= 1_000_000 else " (1M did not run)")
        )
    else:
        sizes = ", ".join(f"{r['rows']:,}: {r['peak_pss_bytes'] / GIB:.2f} GiB" for r in done)
        memory = (
            "- memory flat from 100k to 1M (within 2x): not measured "
            f"(largest finished size {largest['rows']:,}); {sizes}"
        )
    per_k = [r["simulator"]["cost_usd"] / r["rows"] * 1000 for r in done]
    spread = max(per_k) / min(per_k) if min(per_k) else float("inf")
    cost = (
        "- cost linear in rows: $ per 1k rows "
        + ", ".join(f"{r['rows']:,}: {v:.5f}" for r, v in zip(done, per_k, strict=True))
        + f" (max/min {spread:.3f}) — "
        + ("met" if spread <= 1.05 and len(done) > 1 else "one size only" if len(done) == 1 else "NOT met")
    )
    return [memory, cost]


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    started, load = now_iso(), load_average()
    command = command.replace(f"benchmarks.{NAME}", f"benchmarks.workloads.{NAME}", 1)
    systems = args.systems.split(",")
    stored = previous_rows(args.results_dir, NAME) if args.merge else []
    rows: list[dict[str, Any]] = []
    for size in (int(s) for s in args.sizes.split(",")):
        runs = runs_for(size, systems, args.peer_max, args.peer_configs.split(","))
        to_run = []
        for run in runs:
            reason = None if args.force else too_slow([*stored, *rows], run.system, size, args.timeout)
            if reason:
                rows.append({"system": run.system, "config": run.config, "rows": size, "error": reason})
            else:
                to_run.append(run)
        if not to_run:
            continue
        workload = prepare_scaling(size, args.out_dir / str(size), args.seed)
        extra = {"semray_serving": "http" if size <= args.peer_max else args.semray_serving}
        for row in run_all(workload, to_run, args.out_dir / str(size), score, args.timeout, extra):
            rows.append(
                row | {"rows": size, "serving": extra["semray_serving"] if row["system"] == "semray" else "http"}
            )
    if args.merge:
        rows = merge_sizes(stored, rows)
    return BenchmarkResult(
        name=NAME,
        title="Scaling: one sem_filter over 10k to 1M generated rows, zero-latency simulated models",
        command=command,
        parameters={key: value for key, value in vars(args).items() if key not in ("results_dir", "out_dir")},
        figures={"rows": rows},
        markdown=markdown(rows),
        started_at=started,
        load_before=load,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser(NAME, __doc__ or NAME)
    parser.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated corpus sizes")
    parser.add_argument("--systems", default="semray,lotus,palimpzest", help="comma-separated systems")
    parser.add_argument("--peer-max", type=int, default=10000, help="largest size the peers run")
    parser.add_argument("--peer-configs", default="plain", help="peer configurations to run (plain,cheap)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--semray-serving",
        choices=("http", "inprocess"),
        default="inprocess",
        help="above --peer-max: semray calls the simulator over HTTP or inside its Serve replicas (default)",
    )
    parser.add_argument("--force", action="store_true", help="run every size even when the estimate overruns --timeout")
    parser.add_argument("--merge", action="store_true", help="keep stored rows of (system, size) runs not made now")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one system's run of one size may take")
    parser.add_argument("--rerender", action="store_true", help="rebuild the section from the stored rows, run nothing")
    args = parser.parse_args(argv)
    if args.rerender:
        return rerender(args.results_dir, NAME, lambda data: markdown(data["figures"]["rows"]))
    return run_benchmark(NAME, parser, body, argv)


if __name__ == "__main__":
    sys.exit(main())
