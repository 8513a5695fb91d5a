"""Catalog segment search on the medical texts: hybrid vs vector-only vs full-text-only retrieval, and latency.

    .venv/bin/python -m benchmarks.catalog_search [--queries 1200] [--k 10]

The 1,200 symptom texts of ``medical/text_symptoms_data.csv`` (24 diagnoses, 50 texts each) are
embedded with the packaged all-MiniLM-L6-v2 (in-process, offline) and written as ``chunk``
segments of one dataset into a LanceDB ``segments`` table with ``create_segment_indexes``. Two
labelled tasks, each searched by ``search_segments`` in the three modes:

* **text -> same diagnosis**: the query is one text (its words and its vector); the relevant
  segments are the 49 other texts of its diagnosis. The query's own segment is dropped from the
  results (k + 1 are fetched).
* **diagnosis -> texts**: the query is the diagnosis name ("peptic ulcer disease"); the
  relevant segments are its 50 texts.

Reported: recall@k (relevant found in the top k over min(k, relevant)), nDCG@k with binary gains,
and the latency of one search call (p50 / p95, milliseconds, the query already embedded; the
embedding of one query is timed apart).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.harness import (
    BenchmarkResult,
    benchmark_parser,
    load_average,
    now_iso,
    require_shared_data,
    run_benchmark,
)

NAME = "catalog_search"
MODES = ("hybrid", "vector", "fts")


def recall_at(found: Sequence[str], relevant: set[str], k: int) -> float:
    """Relevant segments in the top ``k`` over the most that could be there.

    >>> recall_at(["a", "x", "b"], {"a", "b", "c"}, 2)
    0.5
    """
    return len(set(found[:k]) & relevant) / min(k, len(relevant))


def ndcg_at(found: Sequence[str], relevant: set[str], k: int) -> float:
    """nDCG@k with gain 1 for a relevant segment.

    >>> round(ndcg_at(["x", "a"], {"a"}, 2), 4)
    0.6309
    """
    dcg = sum(1.0 / math.log2(rank + 2) for rank, key in enumerate(found[:k]) if key in relevant)
    ideal = sum(1.0 / math.log2(rank + 2) for rank in range(min(k, len(relevant))))
    return dcg / ideal


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started_at, load_before = now_iso(), load_average()
    folder = require_shared_data("medical")
    import lancedb
    import numpy as np
    import pyarrow as pa

    from benchmarks.set_ops import load_medical
    from semray.catalog.search import create_segment_indexes, search_segments
    from semray.catalog.tables import segments_schema
    from semray.serving.backends.embedder import SentenceEmbedder
    from semray.serving.config import ServingConfig

    medical = load_medical(folder)
    texts = medical.column("symptoms").to_pylist()
    labels = medical.column("text_diagnosis").to_pylist()
    ids = [f"t{number}" for number in medical.column("symptom_id").to_pylist()]
    embedder = SentenceEmbedder(ServingConfig().embedding)
    watch = time.perf_counter()
    vectors = embedder.embed(texts)
    embed_s = time.perf_counter() - watch

    args.out_dir.mkdir(parents=True, exist_ok=True)
    database = lancedb.connect(tempfile.mkdtemp(prefix="catalog-", dir=args.out_dir))
    rows = [
        {
            "segment_id": ids[i],
            "dataset": "medical",
            "document_id": ids[i],
            "parent_id": None,
            "level": "chunk",
            "path": [],
            "ordinal": 0,
            "text": texts[i],
            "start": 0,
            "end": len(texts[i]),
            "topic": None,
            "vector": vectors[i].tolist(),
        }
        for i in range(len(texts))
    ]
    table = database.create_table("segments", pa.Table.from_pylist(rows, schema=segments_schema(vectors.shape[1])))
    watch = time.perf_counter()
    create_segment_indexes(table)
    index_s = time.perf_counter() - watch

    by_label: dict[str, set[str]] = {}
    for key, label in zip(ids, labels, strict=True):
        by_label.setdefault(label, set()).add(key)
    k = args.k
    queries = list(range(len(texts)))[:: max(1, len(texts) // args.queries)][: args.queries]
    diagnoses = sorted(by_label)
    diagnosis_vectors = embedder.embed(diagnoses)
    watch = time.perf_counter()
    for text in texts[:50]:
        embedder.embed([text])
    embed_one_ms = (time.perf_counter() - watch) / 50 * 1000

    figures: dict[str, Any] = {
        "segments": len(texts),
        "diagnoses": len(diagnoses),
        "k": k,
        "text_queries": len(queries),
        "embed_all_s": round(embed_s, 2),
        "index_s": round(index_s, 3),
        "embed_one_query_ms": round(embed_one_ms, 2),
        "modes": {},
    }
    for mode in MODES:
        recalls, ndcgs, latencies = [], [], []
        for i in queries:
            watch = time.perf_counter()
            hits = search_segments(table, texts[i], vectors[i], k=k + 1, mode=mode)  # type: ignore[arg-type]
            latencies.append(time.perf_counter() - watch)
            found = [hit.segment_id for hit in hits if hit.segment_id != ids[i]][:k]
            relevant = by_label[labels[i]] - {ids[i]}
            recalls.append(recall_at(found, relevant, k))
            ndcgs.append(ndcg_at(found, relevant, k))
        label_recalls, label_ndcgs = [], []
        for diagnosis, vector in zip(diagnoses, diagnosis_vectors, strict=True):
            hits = search_segments(table, diagnosis, np.asarray(vector), k=k, mode=mode)  # type: ignore[arg-type]
            found = [hit.segment_id for hit in hits]
            label_recalls.append(recall_at(found, by_label[diagnosis], k))
            label_ndcgs.append(ndcg_at(found, by_label[diagnosis], k))
        figures["modes"][mode] = {
            "text_recall": round(statistics.fmean(recalls), 4),
            "text_ndcg": round(statistics.fmean(ndcgs), 4),
            "diagnosis_recall": round(statistics.fmean(label_recalls), 4),
            "diagnosis_ndcg": round(statistics.fmean(label_ndcgs), 4),
            "p50_ms": round(statistics.median(latencies) * 1000, 2),
            "p95_ms": round(_percentile(latencies, 0.95) * 1000, 2),
        }
    return BenchmarkResult(
        name=NAME,
        title="Catalog segment search on the medical texts: hybrid vs vector vs full text",
        command=command,
        parameters={key: value for key, value in vars(args).items() if key not in ("results_dir", "out_dir")},
        figures=figures,
        markdown=_markdown(figures),
        started_at=started_at,
        load_before=load_before,
    )


def _markdown(figures: dict[str, Any]) -> str:
    k = figures["k"]
    lines = [
        f"{figures['segments']} symptom texts of `medical/text_symptoms_data.csv` as `chunk` segments "
        f"({figures['diagnoses']} diagnoses, 50 texts each), all-MiniLM-L6-v2 vectors (in-process, "
        f"{figures['embed_all_s']} s for all), indexes built in {figures['index_s']} s (FTS with the ICU tokenizer, "
        "scalar indexes; exact vector search at this size). Hybrid = reciprocal rank fusion, "
        "1 / (60 + rank), of the top 50 of each list.",
        "",
        f"- text -> same diagnosis: {figures['text_queries']} queries, each one text (words and vector); relevant = "
        "the 49 other texts of its diagnosis; the query's own segment is dropped.",
        "- diagnosis -> texts: 24 queries, the diagnosis name; relevant = its 50 texts.",
        f"- latency: one `search_segments` call of the text task, query already embedded (embedding one query: "
        f"{figures['embed_one_query_ms']} ms).",
        "",
        f"| mode | text: recall@{k} | text: nDCG@{k} | diagnosis: recall@{k} | diagnosis: nDCG@{k} | p50 ms | p95 ms |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode, row in figures["modes"].items():
        lines.append(
            f"| {mode} | {row['text_recall']} | {row['text_ndcg']} | {row['diagnosis_recall']} | "
            f"{row['diagnosis_ndcg']} | {row['p50_ms']} | {row['p95_ms']} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser(NAME, __doc__ or NAME)
    parser.add_argument("--queries", type=int, default=1200, help="texts used as queries (evenly spaced)")
    parser.add_argument("--k", type=int, default=10, help="results scored per query")
    return run_benchmark(NAME, parser, body, argv)


if __name__ == "__main__":
    sys.exit(main())
