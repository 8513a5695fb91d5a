"""Probe: RSS growth and recall of one HNSW-SQ build against a build on the first rows plus ``optimize()`` per chunk.

Not a harness benchmark (nothing goes to RESULTS.md): the measurement behind the 2026-12-07 section of
``benchmarks/notes/ingest_simulated.md`` (why the catalog's vector index is rebuilt, not updated). Each run is
one fresh process on a scratch LanceDB table of 384-d random unit vectors (``id``, ``vector``), added in
streamed 4,096-row batches like ``store.add_streamed``, indexed like ``search.create_segment_indexes``
(``HnswSq``, cosine, ``ef_construction`` 120, one graph per 10k rows up to 20, or ``--partitions``).

- ``full TOTAL``: add every row, then one ``create_index``.
- ``incremental TOTAL --first F --chunk C``: add F rows and build the index on them, then add C rows at a
  time and call ``table.optimize()`` (LanceDB 0.40's only way to index new rows; it also compacts, and its
  prune is given a 100-year horizon so no version is removed).

It prints one JSON line per step: the RSS before it, its peak (sampled every 20 ms) and growth, seconds,
and for the incremental mode the index statistics and (unless ``--no-step-recall``: each search loads
index pages into LanceDB's cache, which raises the RSS of later steps) the recall@10 of 20 queries
against an exact search (``ef`` 150, as ``retrieval.ANN_EF``).

    python -m benchmarks.vector_index_growth full 110000
    python -m benchmarks.vector_index_growth incremental 150000 --first 50000 --chunk 25000 --partitions 20
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

DIMENSION = 384
BATCH_ROWS = 4_096
QUERIES = 20
K = 10
EF = 150
KEEP_VERSIONS = datetime.timedelta(days=36_500)


class PeakRss:
    """The process's RSS (MiB), and its peak since ``reset``, sampled every 20 ms by a daemon thread."""

    def __init__(self) -> None:
        self.peak = self.now()
        threading.Thread(target=self._sample, daemon=True).start()

    @staticmethod
    def now() -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
        return 0.0

    def reset(self) -> float:
        self.peak = self.now()
        return self.peak

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, self.now())
            time.sleep(0.02)


def unit_vectors(seed: int, rows: int) -> npt.NDArray[np.float32]:
    vectors = np.random.default_rng(seed).standard_normal((rows, DIMENSION), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def rows_of(start: int, count: int) -> pa.Table:
    flat = pa.array(unit_vectors(start, count).ravel(), pa.float32())
    return pa.table(
        {
            "id": pa.array(range(start, start + count), pa.int64()),
            "vector": pa.FixedSizeListArray.from_arrays(flat, DIMENSION),
        }
    )


def add_rows(table: Any, start: int, count: int) -> None:
    def batches() -> Iterator[pa.RecordBatch]:
        for first in range(start, start + count, BATCH_ROWS):
            yield from rows_of(first, min(BATCH_ROWS, start + count - first)).to_batches()

    table.add(pa.RecordBatchReader.from_batches(rows_of(0, 1).schema, batches()))


def graph(rows: int, partitions: int | None) -> Any:
    from lancedb.index import HnswSq

    count = partitions or min(20, -(-rows // 10_000))
    return HnswSq(distance_type="cosine", num_partitions=count, ef_construction=120)


def recall(table: Any) -> float:
    """Share of the exact top ``K`` the index finds, over ``QUERIES`` random queries."""
    found = 0
    for query in unit_vectors(10**9, QUERIES):
        approximate = table.search(query).distance_type("cosine").ef(EF).limit(K).select(["id", "_distance"])
        exact = table.search(query).distance_type("cosine").bypass_vector_index().limit(K).select(["id", "_distance"])
        found += len(set(approximate.to_arrow()["id"].to_pylist()) & set(exact.to_arrow()["id"].to_pylist()))
    return found / (QUERIES * K)


def step(rss: PeakRss, name: str, action: Callable[[], object]) -> None:
    before = rss.reset()
    started = time.perf_counter()
    action()
    seconds = round(time.perf_counter() - started, 1)
    line = {"step": name, "rss_before": round(before), "peak": round(rss.peak), "growth": round(rss.peak - before)}
    print(json.dumps({**line, "s": seconds}), flush=True)


def main() -> None:
    import lancedb

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("full", "incremental"))
    parser.add_argument("total", type=int)
    parser.add_argument("--first", type=int, default=50_000)
    parser.add_argument("--chunk", type=int, default=25_000)
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--no-step-recall", action="store_true")
    args = parser.parse_args()

    rss = PeakRss()
    start = rss.now()
    folder = Path(tempfile.mkdtemp(prefix="vector_index_growth_"))
    try:
        table = lancedb.connect(str(folder)).create_table("rows", schema=rows_of(0, 1).schema)
        done = args.total if args.mode == "full" else args.first
        step(rss, "add", lambda: add_rows(table, 0, done))
        step(rss, "create_index", lambda: table.create_index("vector", config=graph(done, args.partitions)))
        highest = rss.peak
        while done < args.total:
            count = min(args.chunk, args.total - done)
            if not args.no_step_recall:
                print(json.dumps({"rows": done, "recall": recall(table)}), flush=True)
            step(rss, f"add_{done}", functools.partial(add_rows, table, done, count))
            step(rss, f"optimize_{done}", lambda: table.optimize(cleanup_older_than=KEEP_VERSIONS))
            highest = max(highest, rss.peak)
            done += count
            statistics = table.index_stats("vector_idx")
            assert statistics is not None, "the vector index vanished"
            indexes = {"indexed": statistics.num_indexed_rows, "unindexed": statistics.num_unindexed_rows}
            print(json.dumps({**indexes, "indices": statistics.num_indices}), flush=True)
        highest = max(highest, rss.peak)
        summary = {"mode": args.mode, "rows": args.total, "recall": recall(table)}
        print(json.dumps({**summary, "peak_over_start": round(highest - start)}), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
