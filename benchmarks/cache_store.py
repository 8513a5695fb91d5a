"""What copying the response cache to the state store costs (``semray/serving/cache_store.py``).

    .venv/bin/python -m benchmarks.cache_store [--entries 10000,100000] [--stores file,s3]

For each cache size N (entries of about the size a short classification answer takes: a 40-character
text, its parsed value, usage and model), in a ``file://`` store and in moto's S3 server on 127.0.0.1
(pyarrow's S3 filesystem, writes through boto3 with ``If-None-Match``):

- **push N**: the first push of a cache of N entries (one query for the entries the store lacks,
  gzip, one write-once put per 20,000 entries);
- **push idle**: a push with nothing new in a cache of N (the cost each ``cache_sync_s`` and at the
  end of every run while nothing was paid: one SQL anti-join, no request);
- **push 100**: a push after 100 new answers (a run's usual increment);
- **pull N**: a fresh machine's cache taking all N entries (one listing, one GET per segment);
- **pull idle**: a pull with nothing new (the cost each ``start_tiers`` adds: one listing).

Wall and CPU seconds of this process (``time.process_time``; moto's server runs in this process
too, so on S3 its work is counted: an upper bound for the client's). moto is not AWS: its latency
is loopback's, its throughput a Python server's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso, run_benchmark

NAME = "cache_store"


def _answers(count: int, offset: int = 0) -> list[tuple[str, Any]]:
    from semray.serving.cache import cache_key
    from semray.serving.contract import ModelResponse, Usage

    usage = Usage(input_tokens=180, output_tokens=3, dollars=0.00048)
    return [
        (
            cache_key("openai:gpt-x", {"messages": [["user", f"Is review {i} positive?"]]}),
            ModelResponse(
                text=f"Yes, review {i:08d} reads as positive overall.",
                value="Yes",
                confidence=0.93,
                tier="large",
                model="gpt-x",
                usage=usage,
                calls=1,
            ),
        )
        for i in range(offset, offset + count)
    ]


def _timed(work: Callable[[], int]) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    moved = work()
    return {
        "entries": moved,
        "wall_s": round(time.perf_counter() - wall, 4),
        "cpu_s": round(time.process_time() - cpu, 4),
    }


def _measure(store_uri: str, entries: int, folder: Path) -> dict[str, Any]:
    from semray.serving.cache import ResponseCache
    from semray.serving.cache_store import CacheCopy
    from semray.transactions.remote import StateStore

    store = StateStore.from_uri(store_uri)
    source = folder / "a" / "responses.sqlite"
    cache = ResponseCache(source)
    cache.put_many(_answers(entries))
    figures: dict[str, Any] = {"entries": entries}
    copy = CacheCopy(source, store)
    figures["push_all"] = _timed(copy.push)
    figures["push_idle"] = _timed(copy.push)
    cache.put_many(_answers(100, offset=entries))
    figures["push_100"] = _timed(copy.push)
    fresh = CacheCopy(folder / "b" / "responses.sqlite", store)
    figures["pull_all"] = _timed(fresh.pull)
    figures["pull_idle"] = _timed(fresh.pull)
    segments = store.fs.get_file_info(pafs.FileSelector(copy.folder, allow_not_found=True))
    figures["segments"] = len(segments)
    figures["stored_bytes"] = sum(info.size or 0 for info in segments)
    figures["sqlite_bytes"] = source.stat().st_size + sum(
        path.stat().st_size for path in source.parent.glob("responses.sqlite-*")
    )
    copy.close()
    fresh.close()
    return figures


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    started_at, load_before = now_iso(), load_average()
    sizes = [int(size) for size in args.entries.split(",")]
    stores = args.stores.split(",")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sr-cs-", dir="/tmp") as scratch:
        root = Path(scratch)
        if "file" in stores:
            for size in sizes:
                folder = root / f"file-{size}"
                runs.append({"store": "file://", **_measure((folder / "store").as_uri(), size, folder)})
        if "s3" in stores:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
            from s3_server import S3Server  # moto's S3 server on 127.0.0.1 (the tests' helper)

            from semray.settings import with_endpoint

            with S3Server.start() as server:
                for size in sizes:
                    uri = with_endpoint(server.uri(f"bench-{size}"), server.endpoint)
                    runs.append({"store": "s3:// (moto, loopback)", **_measure(uri, size, root / f"s3-{size}")})
    figures = {"runs": runs}
    return BenchmarkResult(
        name=NAME,
        title="The response cache copied to the state store: push and pull costs",
        command=command,
        parameters={key: value for key, value in vars(args).items() if key not in ("results_dir", "out_dir")},
        figures=figures,
        markdown=_markdown(runs),
        started_at=started_at,
        load_before=load_before,
    )


def _markdown(runs: list[dict[str, Any]]) -> str:
    lines = [
        "Seconds (wall / CPU of this process; on S3 moto's server runs in this process) per operation "
        "of `CacheCopy` on a cache of N entries; push idle and pull idle are what each run adds while nothing "
        "is new.",
        "",
        "| store | N | push N | push idle | push 100 | pull N (fresh) | pull idle | segments | stored MB | SQLite MB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run in runs:
        cells = [
            f"{run[step]['wall_s']:.3f} / {run[step]['cpu_s']:.3f}"
            for step in ("push_all", "push_idle", "push_100", "pull_all", "pull_idle")
        ]
        lines.append(
            f"| {run['store']} | {run['entries']:,} | {' | '.join(cells)} | {run['segments']} | "
            f"{run['stored_bytes'] / 1e6:.2f} | {run['sqlite_bytes'] / 1e6:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(NAME, __doc__ or NAME)
    parser.add_argument("--entries", default="10000,100000", help="cache sizes, comma-separated")
    parser.add_argument("--stores", default="file,s3", help="file and/or s3 (moto on 127.0.0.1)")
    return run_benchmark(NAME, parser, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
