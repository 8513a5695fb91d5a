"""What adding a small dataset to a large catalog costs, with the segments in shards and in one table.

Each case runs in a fresh worker process (its own memory peak): the embedding model is loaded and
then replaced by ``benchmarks.ingest.simulated_embed`` (hash-seeded unit vectors of the model's
dimension: no model work, so every second and MiB measured is the catalog's), a large folder of
one-line documents is ingested (``--large``, 100,000 by default: 200,000 segments, past
``ANN_MIN_ROWS``, so vector indexes are built), then a small folder (``--small``, 100 documents) is
added as a second dataset. Reported per case: the large ingest's seconds and RSS peak, and the small
add's wall and CPU seconds and RSS peak over the RSS before it (the publish rebuilds the indexes of
the shards it writes to: with one table, the whole catalog's); then the search latency p50 over
the whole catalog by mode (the shards' cost: one query per shard) and the vector search's
recall@10 against an exact search.

Cases: ``sharded`` (``Settings.catalog_shard_rows`` at its default) and ``one table`` (a shard size
larger than the catalog: how the catalog stored its segments before shards).

    python -m benchmarks.catalog_growth [--large 100000] [--small 100]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso, run_benchmark
from benchmarks.ingest import MIB, ann_recall, generate_documents, rss_peak, simulated_embed

ONE_TABLE = 10**12
"""A shard size no catalog reaches: every segment in one table, as before shards."""
QUERIES = 20


def measure(out_dir: Path, large: Path, small: Path, shard_rows: int) -> dict[str, Any]:
    """In a worker process: ingest ``large``, then time adding ``small`` (module doc)."""
    import psutil

    from semray.catalog.document_pipeline import local_embedder
    from semray.catalog.ingest import add_server
    from semray.catalog.search import search_segments
    from semray.catalog.shards import tables_of
    from semray.catalog.store import Catalog
    from semray.serving.profiles import resolve_serving
    from semray.settings import Settings

    state = out_dir / f"state-{shard_rows}"
    shutil.rmtree(state, ignore_errors=True)
    settings = Settings(state_dir=state, catalog_shard_rows=shard_rows)
    embedder = local_embedder(resolve_serving(settings.models).embedding)
    embedder.embed(["warm up the model"])
    import lancedb  # noqa: F401  # loaded before the clock, as in benchmarks.ingest

    embedder.embed = simulated_embed(embedder.embedder.dimension)  # type: ignore[method-assign]
    process = psutil.Process()
    rss_loaded = process.memory_info().rss
    started = time.perf_counter()
    with rss_peak() as large_peak:
        large_report = add_server(settings, str(large), name="large", engine="local")
    large_s = time.perf_counter() - started
    rss_before = process.memory_info().rss
    started, cpu_started = time.perf_counter(), time.process_time()
    with rss_peak() as small_peak:
        small_report = add_server(settings, str(small), name="small", engine="local")
    small_s, small_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    catalog = Catalog.open(settings)
    segments = catalog.table("segments")
    texts = catalog.rows("segments", where="level = 'paragraph'", columns=["text"]).column("text").to_pylist()
    rng = random.Random(1)
    queries = [" ".join(rng.choice(texts).split()[:6]) for _ in range(QUERIES)]
    vectors = embedder.embed(queries)
    latency: dict[str, float] = {}
    for mode in ("vector", "fts", "hybrid"):
        timings = []
        for query, vector in zip(queries, vectors, strict=True):
            watch = time.perf_counter()
            search_segments(segments, query, vector, k=10, mode=mode)
            timings.append(time.perf_counter() - watch)
        latency[f"{mode}_p50_ms"] = round(statistics.median(timings) * 1000, 1)
    return {
        "shard_rows": shard_rows,
        "shards": len(tables_of(segments)),
        "large_segments": large_report.segments,
        "small_segments": small_report.segments,
        "large_ingest_s": round(large_s, 1),
        "rss_model_loaded_mib": round(rss_loaded / MIB, 1),
        "large_rss_peak_over_loaded_mib": round((large_peak[0] - rss_loaded) / MIB, 1),
        "rss_before_small_mib": round(rss_before / MIB, 1),
        "small_add_s": round(small_s, 2),
        "small_add_cpu_s": round(small_cpu_s, 2),
        "small_add_rss_peak_over_before_mib": round((small_peak[0] - rss_before) / MIB, 1),
        "search": latency,
        "vector_recall_at_10": ann_recall(segments, queries, vectors),
        "load_1min_end": round(os.getloadavg()[0], 2),
    }


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    started_at, load_before = now_iso(), load_average()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    large = generate_documents(args.out_dir / f"lines-{args.large}", args.large, shape="lines")
    small = generate_documents(args.out_dir / f"lines-small-{args.small}", args.small, shape="lines")
    cases: dict[str, Any] = {}
    for label, shard_rows in (("sharded", args.shard_rows), ("one table", ONE_TABLE)):
        worker = [sys.executable, "-m", "benchmarks.catalog_growth", "--worker", str(shard_rows)]
        worker += ["--folders", str(large), str(small), "--out-dir", str(args.out_dir)]
        output = subprocess.run(
            worker, check=True, stdout=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        ).stdout
        cases[label] = json.loads(output.strip().splitlines()[-1])
        print(json.dumps({"case": label, **cases[label]}), file=sys.stderr, flush=True)
    rows = [
        f"| {label} | {case['shards']} | {case['large_ingest_s']} | {case['large_rss_peak_over_loaded_mib']:+.0f} | "
        f"{case['small_add_s']} | {case['small_add_cpu_s']} | "
        f"{case['small_add_rss_peak_over_before_mib']:+.0f} | {case['search']['vector_p50_ms']} | "
        f"{case['search']['fts_p50_ms']} | {case['search']['hybrid_p50_ms']} | {case['vector_recall_at_10']} |"
        for label, case in cases.items()
    ]
    markdown = "\n".join(
        [
            f"A catalog of {args.large:,} one-line documents ({cases['sharded']['large_segments']:,} segments), then "
            f"{args.small} more as a second dataset ({cases['sharded']['small_segments']} segments); simulated "
            "embedding (no model work), engine local, one fresh process per case. `sharded`: "
            f"`catalog_shard_rows` {args.shard_rows:,}; `one table`: every segment in one LanceDB table, as before "
            "shards. The large ingest's RSS peak is over the RSS with the model loaded, the small add's over the "
            "process's RSS just before it; search p50 over the whole "
            f"catalog, {QUERIES} queries per mode, k=10.",
            "",
            "| case | shards | large ingest s | large ingest RSS peak MiB | small add s | small add CPU s "
            "| small add RSS peak MiB | vector p50 ms | fts p50 ms | hybrid p50 ms | vector recall@10 |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            *rows,
        ]
    )
    return BenchmarkResult(
        name="catalog_growth",
        title="Adding a small dataset to a large catalog: segments in shards against one table",
        command=command,
        parameters={"large": args.large, "small": args.small, "shard_rows": args.shard_rows},
        figures=cases,
        markdown=markdown,
        started_at=started_at,
        load_before=load_before,
    )


def main(argv: list[str] | None = None) -> int:
    from semray.settings import Settings

    parser = benchmark_parser("catalog_growth", "Time adding a small dataset to a large catalog, sharded or not.")
    parser.add_argument("--large", type=int, default=100_000, help="documents of the large dataset (default 100k)")
    parser.add_argument("--small", type=int, default=100, help="documents of the small one added after (default 100)")
    parser.add_argument(
        "--shard-rows", type=int, default=Settings.model_fields["catalog_shard_rows"].default, help="the sharded case's"
    )
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folders", type=Path, nargs=2, help=argparse.SUPPRESS)
    arguments = sys.argv[1:] if argv is None else argv
    known, _ = parser.parse_known_args(arguments)
    if known.worker is not None:
        print(json.dumps(measure(known.out_dir, *known.folders, known.worker)))
        return 0
    return run_benchmark("catalog_growth", parser, body, arguments)


if __name__ == "__main__":
    raise SystemExit(main())
