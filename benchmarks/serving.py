"""Serving overheads: the embedder deployment vs sentence-transformers in-process, the per-call
cost of a deployment handle with a zero-latency simulated model, the concurrency achieved
against a 50 ms/call simulated model with a configured maximum, and the embedder's replica with
OpenMP's threads spinning at barriers against sleeping (``OMP_WAIT_POLICY=PASSIVE``, what
``deployments.CPU_MODEL_ENV`` sets): two replicas side by side, two callers at once each, rounds
interleaved, so both see the same load.

    .venv/bin/python -m benchmarks.serving [--texts 2000] [--calls 200] [--requests 160] [--wait-rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso, run_benchmark

NAME = "serving"
_VOCABULARY = (
    "battery screen camera delivery price quality sound keyboard charger warranty color weight speaker design "
    "support refund package manual cable button software update display signal travel kitchen garden office"
)
WORDS = tuple(_VOCABULARY.split(" "))


def _texts(count: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 40))) + "." for _ in range(count)]


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    import os

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    from semray.cluster.connect import connect, shutdown
    from semray.serving.backends.embedder import SentenceEmbedder
    from semray.serving.backends.simulated import SimulatedBackend
    from semray.serving.config import ServingConfig, TierConfig
    from semray.serving.contract import ModelRequest, OutputConstraint
    from semray.serving.deployments import start_tiers, stop_tiers
    from semray.serving.simulator import ModelProfile, SimulatorConfig
    from semray.serving.tier import ModelTier
    from semray.settings import Settings

    started_at, load_before = now_iso(), load_average()
    state = Path(tempfile.mkdtemp(prefix="sr-bench-", dir="/tmp"))
    settings = Settings(state_dir=state, num_cpus=2)
    latency_s = args.latency_ms / 1000.0
    simulator = SimulatorConfig(
        models={
            "sim-zero": ModelProfile(max_concurrency=64),
            "sim-50ms": ModelProfile(latency_base_s=latency_s, max_concurrency=args.max_concurrency),
        }
    )
    config = ServingConfig(
        simulator=simulator,
        small=TierConfig(backend="simulated", model="sim-zero"),
        large=TierConfig(backend="simulated", model="sim-50ms", max_ongoing_requests=64),
        cache_enabled=False,
        app_prefix="semray-bench",
    )
    connect(settings)
    figures: dict[str, Any] = {}
    try:
        deploy_started = time.perf_counter()
        handles = start_tiers(config, settings)
        figures["deploy_s"] = round(time.perf_counter() - deploy_started, 2)

        # 1. Embedder: the deployment vs the same model in this process, same batches.
        texts = _texts(args.texts)
        batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
        handles.embed(batches[0])  # warm the replica
        remote_s = _median_seconds(lambda: [handles.embed(b) for b in batches], args.repeats)
        local = SentenceEmbedder(config.embedding)
        local.embed(batches[0])
        local_s = _median_seconds(lambda: [local.embed(b) for b in batches], args.repeats)
        figures["embed"] = {
            "texts": len(texts),
            "batch": args.batch,
            "deployment_texts_per_s": round(len(texts) / remote_s, 1),
            "in_process_texts_per_s": round(len(texts) / local_s, 1),
            "ratio": round(local_s / remote_s, 3),
        }

        # 2. Per-call overhead: one-request batches through the handle vs the same tier in-process.
        def request(i: int, tag: str) -> ModelRequest:
            return ModelRequest(prompt=f"{tag} question {i}: is this fine?", constraint=OutputConstraint.text())

        tier = ModelTier("small", config.small, SimulatedBackend(config.small, simulator))
        handles.generate("small", [request(0, "warm")])
        remote_calls, local_calls = [], []
        for i in range(args.calls):
            started = time.perf_counter()
            handles.generate("small", [request(i, "remote")])
            remote_calls.append(time.perf_counter() - started)
            started = time.perf_counter()
            asyncio.run(tier.generate([request(i, "local")]))
            local_calls.append(time.perf_counter() - started)
        batch = [request(i, "batch") for i in range(64)]
        batch_remote = _median_seconds(lambda: handles.generate("small", batch), args.repeats)
        batch_local = _median_seconds(lambda: asyncio.run(tier.generate(batch)), args.repeats)
        figures["overhead"] = {
            "calls": args.calls,
            "handle_p50_ms": round(statistics.median(remote_calls) * 1000, 2),
            "handle_p95_ms": round(_percentile(remote_calls, 0.95) * 1000, 2),
            "in_process_p50_ms": round(statistics.median(local_calls) * 1000, 2),
            "overhead_p50_ms": round((statistics.median(remote_calls) - statistics.median(local_calls)) * 1000, 2),
            "batch64_handle_ms": round(batch_remote * 1000, 2),
            "batch64_in_process_ms": round(batch_local * 1000, 2),
            "batch64_overhead_per_row_ms": round((batch_remote - batch_local) / 64 * 1000, 3),
        }

        # 3. Concurrency against a slow model: one big batch, then several callers at once.
        def achieved(calls: int, seconds: float) -> float:
            return calls * latency_s / seconds

        big = [request(i, "slow") for i in range(args.requests)]
        handles.generate("large", big[:4])
        one_batch_s = _median_seconds(lambda: handles.generate("large", big), args.repeats)
        callers = 4
        chunks = [big[i::callers] for i in range(callers)]

        def parallel() -> None:
            with ThreadPoolExecutor(callers) as pool:
                list(pool.map(lambda chunk: handles.generate("large", chunk), chunks))

        parallel_s = _median_seconds(parallel, args.repeats)
        figures["concurrency"] = {
            "requests": args.requests,
            "latency_ms": args.latency_ms,
            "max_concurrency": args.max_concurrency,
            "one_batch_s": round(one_batch_s, 3),
            "one_batch_achieved": round(achieved(args.requests, one_batch_s), 2),
            "one_batch_share_of_max": round(achieved(args.requests, one_batch_s) / args.max_concurrency, 3),
            "four_callers_s": round(parallel_s, 3),
            "four_callers_achieved": round(achieved(args.requests, parallel_s), 2),
            "four_callers_share_of_max": round(achieved(args.requests, parallel_s) / args.max_concurrency, 3),
        }
        figures["wait_policy"] = _wait_policy(config, texts, args.wait_rounds)
    finally:
        stop_tiers("semray-bench")
        shutdown()
    return BenchmarkResult(
        name=NAME,
        title="Serving: embedder deployment, handle overhead, achieved concurrency",
        command=command,
        parameters={key: value for key, value in vars(args).items() if key not in ("results_dir", "out_dir")},
        figures=figures,
        markdown=_markdown(figures),
        started_at=started_at,
        load_before=load_before,
    )


def _wait_policy(config: Any, texts: list[str], rounds: int, batch: int = 75) -> dict[str, Any]:
    """The embedder's replica as deployed (OpenMP threads sleep at barriers) against one whose
    threads spin, two callers at once (as a cascade's proxy actors call it), rounds interleaved."""
    from ray import serve

    from semray.serving.deployments import CPU_MODEL_ENV, EmbedderServer

    handles = {}
    for policy, env in (("spinning", {}), ("passive", CPU_MODEL_ENV)):
        options: dict[str, Any] = {"num_cpus": config.embedding.num_cpus}
        if env:
            options["runtime_env"] = {"env_vars": dict(env)}
        deployment = serve.deployment(EmbedderServer).options(name=f"wait-{policy}", ray_actor_options=options)
        handles[policy] = serve.run(deployment.bind(config, {}), name=f"semray-bench-wait-{policy}", route_prefix=None)
    batches = [texts[i : i + batch] for i in range(0, len(texts), batch)]
    for handle in handles.values():
        handle.embed.remote(batches[0]).result()
    seconds = {policy: 0.0 for policy in handles}
    try:
        for round_ in range(rounds):
            order = list(handles) if round_ % 2 == 0 else list(handles)[::-1]
            for policy in order:
                started = time.perf_counter()
                with ThreadPoolExecutor(2) as pool:
                    list(pool.map(lambda b, h=handles[policy]: h.embed.remote(b).result(), batches))
                seconds[policy] += time.perf_counter() - started
    finally:
        for policy in handles:
            serve.delete(f"semray-bench-wait-{policy}")
    texts_per_s = {policy: round(rounds * len(texts) / value, 1) for policy, value in seconds.items()}
    return {
        "rounds": rounds,
        "texts": len(texts),
        "batch": batch,
        "texts_per_s": texts_per_s,
        "passive_speedup": round(seconds["spinning"] / seconds["passive"], 3),
        "load_after": load_average(),
    }


def _markdown(figures: dict[str, Any]) -> str:
    embed, overhead, concurrency = figures["embed"], figures["overhead"], figures["concurrency"]
    return "\n".join(
        [
            f"Tiers deployed on a local Ray (num_cpus=2) in {figures['deploy_s']} s. Simulated models, cache off.",
            "",
            "| measure | deployment | in-process | ratio / overhead | target |",
            "| --- | --- | --- | --- | --- |",
            f"| embedder, {embed['texts']} texts in batches of {embed['batch']} (texts/s) | "
            f"{embed['deployment_texts_per_s']} | {embed['in_process_texts_per_s']} | {embed['ratio']}x | >= 0.8x |",
            f"| one-request call, zero-latency model (p50 ms, {overhead['calls']} calls) | "
            f"{overhead['handle_p50_ms']} (p95 {overhead['handle_p95_ms']}) | {overhead['in_process_p50_ms']} | "
            f"+{overhead['overhead_p50_ms']} ms | |",
            f"| 64-request batch, zero-latency model (ms) | {overhead['batch64_handle_ms']} | "
            f"{overhead['batch64_in_process_ms']} | +{overhead['batch64_overhead_per_row_ms']} ms/row | |",
            "",
            f"Concurrency against a {concurrency['latency_ms']} ms/call model limited to "
            f"{concurrency['max_concurrency']} calls at once, {concurrency['requests']} requests "
            "(achieved = calls x latency / wall time; target >= 80% of the maximum):",
            "",
            "| sent as | wall (s) | achieved concurrency | share of max |",
            "| --- | --- | --- | --- |",
            f"| one batch | {concurrency['one_batch_s']} | {concurrency['one_batch_achieved']} | "
            f"{concurrency['one_batch_share_of_max']:.0%} |",
            f"| four callers at once | {concurrency['four_callers_s']} | {concurrency['four_callers_achieved']} | "
            f"{concurrency['four_callers_share_of_max']:.0%} |",
            *_wait_policy_lines(figures.get("wait_policy")),
        ]
    )


def _wait_policy_lines(wait: dict[str, Any] | None) -> list[str]:
    if not wait:
        return []
    rate = wait["texts_per_s"]
    return [
        "",
        f"Embedder replica, OpenMP threads spinning vs sleeping at barriers ({wait['rounds']} interleaved rounds of "
        f"{wait['texts']} texts, batches of {wait['batch']}, two callers at once):",
        "",
        "| replica | texts/s |",
        "| --- | --- |",
        f"| spinning (OpenMP's default) | {rate['spinning']} |",
        f"| passive (as deployed) | {rate['passive']} |",
        f"| passive / spinning | {wait['passive_speedup']}x |",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser(NAME, __doc__ or NAME)
    parser.add_argument("--texts", type=int, default=2000, help="texts embedded")
    parser.add_argument("--batch", type=int, default=256, help="texts per embed call")
    parser.add_argument("--calls", type=int, default=200, help="one-request calls for the overhead figure")
    parser.add_argument("--requests", type=int, default=160, help="requests against the slow model")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="the slow model's latency per call")
    parser.add_argument("--max-concurrency", type=int, default=8, help="the slow model's concurrency limit")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per timed figure (median reported)")
    parser.add_argument("--wait-rounds", type=int, default=4, help="interleaved rounds, spinning vs passive replica")
    return run_benchmark(NAME, parser, body, argv)


if __name__ == "__main__":
    sys.exit(main())
