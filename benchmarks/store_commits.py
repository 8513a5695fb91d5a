"""What a commit on the driver's node costs when it is also stored in the run's object store.

With ``Settings.state_uri`` a batch committed on the driver's node is journaled (an fsync'd append,
its table in an fsync'd parquet file when over ``INLINE_BYTES``) and then put in the store as a
commit object, its table's object first (``transactions/batches.py``), so that it survives the
loss of the driver's state folder. This times ``BatchLedger.commit`` in the driver's process
without a store (the journal only: what such a commit cost before), with a ``file://`` store, and
with moto's S3 server on 127.0.0.1 (a subprocess: its CPU is not this process's), for small
batches (8 rows, inline in the record) and large ones (a parquet table past 64 KiB). Per commit:
the median and 90th percentile wall time, and this process's CPU time (user + system over the
loop, divided by the commits). A real S3 endpoint adds its network round trips to the wall time.

    python -m benchmarks.store_commits [--batches 200]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso, run_benchmark
from semray.settings import Settings
from semray.transactions import LLMUsage, batch_key, begin_run

PLAN = {"op": "sem_filter", "prompt": "is {review} positive?"}
OPERATOR = "op1"
ROWS = 8
SIZES = {"small": 0, "large": 100_000}
"""Characters of the answer column's first row: 0 keeps the table inline, 100k sends it to a file."""
BUCKET = "semray-bench"
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIAFAKESEMRAYBENCH1",
    "AWS_SECRET_ACCESS_KEY": "fake/SemrayBenchmarkSecretKey000000000001",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def table(index: int, size: str) -> tuple[list[str], pa.Table]:
    rows = [f"b{index}-r{offset}" for offset in range(ROWS)]
    answers = ["y" * SIZES[size] if offset == 0 else "yes" for offset in range(ROWS)]
    return rows, pa.table({"_rowid": rows, "answer": answers})


def time_commits(settings: Settings, size: str, batches: int) -> dict[str, float]:
    """Commit ``batches`` batches through the driver's ledger; seconds per commit."""
    run = begin_run(settings, PLAN, None)
    try:
        work = [table(index, size) for index in range(batches)]
        walls: list[float] = []
        cpu_before = time.process_time()
        for rows, answers in work:
            started = time.perf_counter()
            run.ledger.commit(OPERATOR, batch_key(OPERATOR, rows), rows, answers, LLMUsage(calls=ROWS))
            walls.append(time.perf_counter() - started)
        cpu = time.process_time() - cpu_before
    finally:
        run.close()
    walls.sort()
    return {
        "wall_median_ms": statistics.median(walls) * 1000,
        "wall_p90_ms": walls[int(0.9 * (len(walls) - 1))] * 1000,
        "cpu_ms": cpu / batches * 1000,
    }


@contextlib.contextmanager
def moto_server(out_dir: Path) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 in a subprocess, a bucket made; yields its endpoint."""
    import boto3

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    os.environ.update(FAKE_CREDENTIALS)
    log = (out_dir / "moto.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:  # until the server accepts connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


def added(figures: dict[str, Any], store: str, size: str, figure: str) -> float:
    """What storing a commit in ``store`` adds to ``figure`` against the journal alone."""
    return float(figures[f"{store}/{size}"][figure] - figures[f"none/{size}"][figure])


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    started, load = now_iso(), load_average()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    figures: dict[str, Any] = {}
    with moto_server(args.out_dir) as endpoint:
        stores: dict[str, tuple[str | None, str | None]] = {  # state_uri, state_endpoint
            "none": (None, None),
            "file": ((args.out_dir / f"store-{stamp}").as_uri(), None),
            "s3": (f"s3://{BUCKET}/{stamp}", endpoint),
        }
        for store, (uri, store_endpoint) in stores.items():
            settings = Settings(
                state_dir=args.out_dir / f"state-{stamp}-{store}",
                state_uri=uri,
                state_endpoint=store_endpoint,
                state_sync_s=3600.0,  # no push during the loop: only the commits are timed
            )
            for size in SIZES:
                figures[f"{store}/{size}"] = time_commits(settings, size, args.batches)
    rows = [
        f"| {key.split('/')[0]} | {key.split('/')[1]} | {f['wall_median_ms']:.2f} | {f['wall_p90_ms']:.2f} | "
        f"{f['cpu_ms']:.2f} |"
        for key, f in figures.items()
    ]
    extra_rows = [
        f"| {store} | {size} | {added(figures, store, size, 'wall_median_ms'):+.2f} "
        f"| {added(figures, store, size, 'cpu_ms'):+.2f} |"
        for store in ("file", "s3")
        for size in SIZES
    ]
    markdown = "\n".join(
        [
            f"`BatchLedger.commit` on the driver's node, {args.batches} batches of {ROWS} rows per row below "
            "(small: inline in the journal record; large: a parquet table past 64 KiB). `none` is the journal "
            "alone, as before; `file` and `s3` also put the commit object (and the large table's object). moto "
            "runs in a subprocess, so CPU is the committing process's only.",
            "",
            "| store | batch | wall median ms | wall p90 ms | CPU ms |",
            "| --- | --- | --- | --- | --- |",
            *rows,
            "",
            "Added per commit by storing it (median wall, CPU; against `none`):",
            "",
            "| store | batch | wall ms | CPU ms |",
            "| --- | --- | --- | --- |",
            *extra_rows,
        ]
    )
    return BenchmarkResult(
        name="store_commits",
        title="Driver-node commits stored in the state store: cost per batch",
        command=command,
        parameters={"batches": args.batches, "rows_per_batch": ROWS},
        figures=figures,
        markdown=markdown,
        started_at=started,
        load_before=load,
    )


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser("store_commits", "Time driver-node commits with and without a state store.")
    parser.add_argument("--batches", type=int, default=200, help="commits per store and batch size (default 200)")
    return run_benchmark("store_commits", parser, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
