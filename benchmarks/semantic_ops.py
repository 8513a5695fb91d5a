"""Semantic operator overhead: semray's sem_filter vs a plain Ray Data map_batches calling the
same Serve deployment, with a zero-latency simulated model (what the operator machinery costs:
lowering, the run journal, ledger lookups and commits) and with a 50 ms/call model at the
configured concurrency (how close the pipeline gets to the model's limit).

    .venv/bin/python -m benchmarks.semantic_ops [--rows 2000] [--slow-rows 640] [--repeats 3]

Both sides read the same Arrow table, render the same prompts (``render_prompt`` +
``build_request``), send one ``TierHandles.generate`` per batch of ``semantic_batch_size``
rows from an actor pool of ``semantic_actors`` actors at 0.25 CPU each, and keep the rows
answered Yes; their results are checked equal to the simulator's labels. The response cache
is off, so every row is a model call on both sides. Runs alternate (semray, plain, semray, ...)
so load changes on the shared machine hit both; medians are reported.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso, run_benchmark
from benchmarks.harness.texts import nonsense_texts

NAME = "semantic_ops"
INSTRUCTION = "{text} is urgent"


def _tickets(rows: int, seed: int = 5) -> pa.Table:
    """Unique nonsense texts (so the simulator matches each row) and an ``urgent`` label (30% true)."""
    rng = random.Random(seed)
    texts = nonsense_texts(rows, 16, rng)
    urgent = ["true" if rng.random() < 0.3 else "false" for _ in range(rows)]
    return pa.table({"ticket_id": [f"T{i:06d}" for i in range(rows)], "text": texts, "urgent": urgent})


class PlainFilter:
    """The baseline: what a user would write by hand with Ray Data and the same deployment."""

    def __init__(self, tiers: Any, tier: str) -> None:
        self.tiers = tiers
        self.tier = tier

    def __call__(self, batch: pa.Table) -> pa.Table:
        from semray.serving.prompts.operators import build_request
        from semray.serving.prompts.render import render_prompt

        requests = [
            build_request("filter", render_prompt(INSTRUCTION, row).text, request_id=str(row["ticket_id"]))
            for row in batch.select(["ticket_id", "text"]).to_pylist()
        ]
        responses = self.tiers.generate(self.tier, requests)
        keep = [response.value in (True, "Yes", "yes") for response in responses]
        return batch.filter(pa.array(keep, pa.bool_()))


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray.data as rd

    import semray
    from semray.cluster.connect import connect, shutdown
    from semray.serving.config import ServingConfig, TierConfig
    from semray.serving.deployments import start_tiers, stop_tiers
    from semray.serving.simulator import ModelProfile, SimulatorConfig, TaskSpec
    from semray.settings import Settings

    started_at, load_before = now_iso(), load_average()
    state = Path(tempfile.mkdtemp(prefix="sr-bench-", dir="/tmp"))
    settings = Settings(state_dir=state, num_cpus=2)
    table = _tickets(max(args.rows, args.slow_rows))
    truth = set(table.filter(pc.equal(table.column("urgent"), "true")).column("ticket_id").to_pylist())
    simulator = SimulatorConfig.from_labels(
        table,
        key_column="ticket_id",
        text_columns=["text"],
        dataset="tickets",
        tasks=[
            TaskSpec(name="urgent", kind="filter", label_column="urgent", true_values=("true",), keywords=("urgent",))
        ],
        models={
            "sim-zero": ModelProfile(error_rate=0.0, max_concurrency=64),
            "sim-slow": ModelProfile(
                error_rate=0.0, latency_base_s=args.latency_ms / 1000.0, max_concurrency=args.max_concurrency
            ),
        },
    )
    serving = ServingConfig(
        simulator=simulator,
        large=TierConfig(backend="simulated", model="sim-zero", max_ongoing_requests=64),
        small=TierConfig(backend="simulated", model="sim-slow", max_ongoing_requests=64),
        cache_enabled=False,
        app_prefix="semray-bench",
    )
    inputs = table.select(["ticket_id", "text"])
    connect(settings)
    figures: dict[str, Any] = {"batch_rows": settings.semantic_batch_size, "actors": settings.semantic_actors}
    try:
        started = time.perf_counter()
        handles = start_tiers(serving, settings, tiers=["small", "large"])
        figures["deploy_s"] = round(time.perf_counter() - started, 2)

        def semray_run(rows: int, tier: str) -> set[str]:
            query = semray.from_arrow(inputs.slice(0, rows), "tickets", settings=settings).with_serving(serving)
            result = query.sem_filter(INSTRUCTION, tier=tier).execute()
            assert result.usage.calls == rows, f"{result.usage.calls} calls for {rows} rows: is the cache on?"
            return set(result.table.column("ticket_id").to_pylist())

        def plain_run(rows: int, tier: str) -> set[str]:
            dataset = rd.from_arrow(inputs.slice(0, rows)).map_batches(
                PlainFilter,
                fn_constructor_args=(handles, tier),
                compute=rd.ActorPoolStrategy(min_size=1, max_size=settings.semantic_actors),
                batch_size=settings.semantic_batch_size,
                batch_format="pyarrow",
                num_cpus=0.25,
            )
            kept = pa.concat_tables(list(dataset.iter_batches(batch_size=None, batch_format="pyarrow")))
            return set(kept.column("ticket_id").to_pylist())

        for name, rows, tier in (("zero_latency", args.rows, "large"), ("slow_model", args.slow_rows, "small")):
            expected = {ticket for ticket in truth if int(ticket[1:]) < rows}
            semray_run(min(rows, 64), tier)  # warm: actors' imports, handles, the journal folder
            plain_run(min(rows, 64), tier)
            timings = _alternate(
                {
                    "semray": functools.partial(semray_run, rows, tier),
                    "plain": functools.partial(plain_run, rows, tier),
                },
                expected,
                args.repeats,
            )
            semray_s, plain_s = statistics.median(timings["semray"]), statistics.median(timings["plain"])
            figures[name] = {
                "rows": rows,
                "tier_model": serving.tier(tier).model,
                "semray_s": [round(t, 2) for t in timings["semray"]],
                "plain_s": [round(t, 2) for t in timings["plain"]],
                "semray_rows_per_s": round(rows / semray_s, 1),
                "plain_rows_per_s": round(rows / plain_s, 1),
                "overhead": round(semray_s / plain_s - 1, 3),
            }
        slow = figures["slow_model"]
        slow["latency_ms"] = args.latency_ms
        slow["max_concurrency"] = args.max_concurrency
        slow["model_limit_rows_per_s"] = round(args.max_concurrency / (args.latency_ms / 1000.0), 1)
        slow["semray_share_of_limit"] = round(slow["semray_rows_per_s"] / slow["model_limit_rows_per_s"], 3)
        slow["plain_share_of_limit"] = round(slow["plain_rows_per_s"] / slow["model_limit_rows_per_s"], 3)
    finally:
        stop_tiers("semray-bench")
        shutdown()
    return BenchmarkResult(
        name=NAME,
        title="Semantic operators: sem_filter vs plain Ray Data map_batches on the same deployment",
        command=command,
        parameters={key: value for key, value in vars(args).items() if key not in ("results_dir", "out_dir")},
        figures=figures,
        markdown=_markdown(figures),
        started_at=started_at,
        load_before=load_before,
    )


def _alternate(runs: dict[str, Callable[[], set[str]]], expected: set[str], repeats: int) -> dict[str, list[float]]:
    """Seconds of each run, ``repeats`` times, alternating; every run's rows must equal ``expected``."""
    timings: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            started = time.perf_counter()
            kept = run()
            timings[name].append(time.perf_counter() - started)
            if kept != expected:
                raise AssertionError(f"{name} kept {len(kept)} rows, the labels say {len(expected)}")
    return timings


def _markdown(figures: dict[str, Any]) -> str:
    zero, slow = figures["zero_latency"], figures["slow_model"]
    return "\n".join(
        [
            f"`sem_filter` vs a hand-written Ray Data `map_batches` (same prompts, same `TierHandles.generate`, "
            f"actor pool of {figures['actors']} at 0.25 CPU, batches of {figures['batch_rows']} rows), on a local "
            f"Ray (num_cpus=2); simulated models, cache off, results checked equal to the labels. Tiers deployed "
            f"in {figures['deploy_s']} s. Each figure is the median of alternating runs (all runs in the JSON); "
            "semray's time includes the whole query: lowering, opening and closing the journaled run, ledger "
            "lookups and commits (fsync'd), collecting rows.",
            "",
            "| model | rows | semray (rows/s) | plain map_batches (rows/s) | semray overhead | target |",
            "| --- | --- | --- | --- | --- | --- |",
            f"| zero latency | {zero['rows']} | {zero['semray_rows_per_s']} | {zero['plain_rows_per_s']} | "
            f"{zero['overhead']:+.0%} | <= +25% |",
            f"| {slow['latency_ms']:g} ms/call, {slow['max_concurrency']} at once | {slow['rows']} | "
            f"{slow['semray_rows_per_s']} ({slow['semray_share_of_limit']:.0%} of the model's "
            f"{slow['model_limit_rows_per_s']:g}) | {slow['plain_rows_per_s']} ({slow['plain_share_of_limit']:.0%}) | "
            f"{slow['overhead']:+.0%} | |",
            "",
            "Both sides read one in-memory table, which Ray Data holds as one block: one task, so one actor of "
            "the pool does all the work, one batch at a time (32 requests against a model serving 8 at once), "
            "and a few seconds of actor-pool startup per query weigh on runs this short. semray's extra time is "
            "its per-query fixed cost (run journal, lowering, tier status check) plus an fsync'd ledger commit "
            "per batch.",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser(NAME, __doc__ or NAME)
    parser.add_argument("--rows", type=int, default=2000, help="rows for the zero-latency model")
    parser.add_argument("--slow-rows", type=int, default=640, help="rows for the slow model")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="the slow model's latency per call")
    parser.add_argument("--max-concurrency", type=int, default=8, help="the slow model's calls at once")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per side (median reported)")
    return run_benchmark(NAME, parser, body, argv)


if __name__ == "__main__":
    sys.exit(main())
