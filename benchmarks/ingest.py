"""Catalog ingest throughput and memory, against raw embedding throughput; search latency at each size.

    .venv/bin/python -m benchmarks.ingest [--docs 10000 100000] [--shape notes|sections] [--shared] [--engine local|ray]
        [--embedding model|simulated]

Corpora, each ingested by a fresh worker process (so each has its own memory peak) into an empty
catalog with ``catalog.ingest.add_server`` (hash, profile, read + segment + embed, stage, publish,
build the indexes), the embedding model already loaded:

* generated (``--docs N ...``, deterministic, kept under ``--out-dir`` and reused). ``--shape notes``
  (default): a short markdown note, ``# <three words>`` then one paragraph of 12 to 20 common English
  words (about 150 bytes; 4 segments: document, section, heading paragraph, body paragraph, of which
  3 distinct texts: the section is the whole note). ``--shape sections``: a title and three ``##``
  sections of one or two paragraphs of 30 to 60 words (about 13 segments, 1.5 kB). ``--shape lines``: one
  sentence of 6 to 10 common English words (about 60 bytes; 2 segments, document and paragraph, of one
  distinct text): the per-document costs (hashing, files, rows, staging) at a third of the notes' model work,
  for memory at many documents on a slow machine.
* shared (``--shared``, from ``../shared/data``; skipped with a message when absent): the 250 Enron
  emails as they are (a folder of .txt files), and the 1,200 medical symptom texts written one per
  .txt file under ``--out-dir``.

Then the worker embeds the texts the ingest embedded (every distinct segment text, cut to
``EMBED_CHARS``, over the whole corpus: fewer than or as many as the ingest, which embeds each
distinct text of a batch once, so the ratio errs low) with the same ``SentenceEmbedder`` in one call
(sentence-transformers batches and length-sorts them itself): that is the raw throughput of the
model on this machine, over up to ``--raw-texts`` of them (an evenly spaced subset beyond). Last,
``--queries`` searches of the new catalog in each mode (``search_segments``, k=10, the query's first
six words of a random segment, embedded beforehand) give the latency p50/p95 at that size, and the
vector search's recall@10 against an exact search of the same queries (``ann_recall``: what the ANN
index, from ``ANN_MIN_ROWS`` segments, loses; 1.0 below it).

Reported per corpus: documents/s, segments/s, embeddings/s (distinct texts) of the whole ingest, raw
embeddings/s, their ratio (goal >= 0.8) by wall time and by the worker's CPU time (a shared machine's
load changes between the ingest and the raw call; CPU seconds less so, though the model's CPU per text
still grows with the load: its threads spin and wait on busy cores), the ingest's CPU split into the
embedder's calls (``ingest_model_cpu_s``, with its CPU milliseconds per text beside the raw call's) and
the rest (``ingest_other_cpu_s``: hashing, reading, segmenting, staging, the publish, the indexes;
``lancedb`` is imported before the clock, like the model is loaded), whether the ANN index was built (from
``retrieval.ANN_MIN_ROWS`` segments), memory: the worker's RSS once the model was loaded, its peak
RSS during the ingest (sampled every 0.1 s inside the worker), and the PSS peak of its process tree
over the whole worker (sampled from outside; it includes the raw and search phases).

``--embedding simulated`` (memory only, never a throughput figure): the model is loaded as usual, but the
ingest's embedder returns a unit vector drawn from a generator seeded by each text's hash instead of
running the model (``simulated_embed``), so every other step (hashing, reading, segmenting, staging,
publishing, the indexes, with as many vectors of the model's dimension) runs as in a real ingest at a
fraction of its time: the way to see the memory at 100k documents on a slow machine. No raw
throughput is measured then; the result is written as ``ingest_simulated`` (its own RESULTS.md section),
so it never replaces a real-model ``ingest`` result.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from benchmarks.harness import (
    BenchmarkResult,
    MemorySampler,
    benchmark_parser,
    load_average,
    now_iso,
    run_benchmark,
)
from benchmarks.harness.data import MissingData, shared_data_dir

NAME = "ingest"
SIMULATED_NAME = "ingest_simulated"
WORDS = [
    "patient",
    "report",
    "market",
    "river",
    "engine",
    "contract",
    "budget",
    "garden",
    "signal",
    "harbor",
    "winter",
    "supply",
    "doctor",
    "meeting",
    "invoice",
    "network",
    "storm",
    "village",
    "battery",
    "school",
    "record",
    "answer",
    "planet",
    "crystal",
    "museum",
    "ticket",
    "kitchen",
    "theory",
    "voltage",
    "freight",
    "lawyer",
    "sample",
    "pillow",
    "desert",
    "rocket",
    "silver",
    "orchard",
    "lesson",
    "tunnel",
    "vaccine",
    "ledger",
    "cotton",
    "bridge",
    "summit",
    "canvas",
    "pepper",
    "archive",
    "island",
    "copper",
    "fabric",
    "throat",
    "mirror",
]
MIB = 1024 * 1024
SHAPES = ("notes", "sections", "lines")
MODES: tuple[Literal["hybrid", "vector", "fts"], ...] = ("hybrid", "vector", "fts")


def generate_documents(folder: Path, count: int, seed: int = 0, shape: str = "sections") -> Path:
    """``count`` markdown documents of ``shape`` in ``folder`` (kept and reused when already complete)."""
    marker = folder.parent / f"{folder.name}.complete"  # outside the folder: the ingest would list it
    if marker.is_file() and marker.read_text() == f"{count} {shape}":
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    rng = random.Random(seed)
    for number in range(count):
        shard = folder / f"{number // 1000:03d}"
        shard.mkdir(parents=True, exist_ok=True)
        if shape == "lines":
            line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 10))).capitalize()
            (shard / f"line{number:06d}.txt").write_text(f"{line}.\n", encoding="utf-8")
            continue
        if shape == "notes":
            title = " ".join(rng.sample(WORDS, 3)).capitalize()
            body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 20))).capitalize()
            (shard / f"note{number:06d}.md").write_text(f"# {title}\n\n{body}.\n", encoding="utf-8")
            continue
        parts = [f"# Document {number}: {' '.join(rng.sample(WORDS, 3))}", ""]
        for section in range(3):
            parts += [f"## Section {section} {rng.choice(WORDS)}", ""]
            for _ in range(rng.randint(1, 2)):
                parts += [" ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 60))).capitalize() + ".", ""]
        (shard / f"doc{number:06d}.md").write_text("\n".join(parts), encoding="utf-8")
    marker.write_text(f"{count} {shape}")
    return folder


def shared_corpora(out_dir: Path) -> dict[str, Path]:
    """The shared corpora as document folders: the Enron emails as they are, the medical texts one file each."""
    data = shared_data_dir()
    emails, symptoms = data / "enron" / "emails", data / "medical" / "text_symptoms_data.csv"
    if not emails.is_dir() or not symptoms.is_file():
        raise MissingData(f"benchmark data not found: {emails} and {symptoms} (../shared/data); run without --shared")
    folder = out_dir / "medical-notes"
    if not folder.is_dir():
        staging = out_dir / "medical-notes.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        with symptoms.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                (staging / f"{row['symptom_id']}.txt").write_text(row["symptoms"] + "\n", encoding="utf-8")
        staging.replace(folder)
    return {"enron": emails, "medical": folder}


@contextmanager
def rss_peak() -> Iterator[list[int]]:
    """The peak RSS of this process while the block runs, sampled every 0.1 s: ``[peak_bytes]`` afterwards."""
    import psutil

    process, peak, done = psutil.Process(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            done.wait(0.1)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        yield peak
    finally:
        done.set()
        watcher.join()
        peak[0] = max(peak[0], process.memory_info().rss)


def simulated_embed(dimension: int) -> Any:
    """An ``embed(texts)`` returning, for each text, a unit vector seeded by the text's hash (module doc)."""
    import hashlib

    import numpy as np

    def embed(texts: Sequence[str]) -> Any:
        vectors = np.empty((len(texts), dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            vectors[row] = np.random.default_rng(seed).standard_normal(dimension, dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    return embed


def measure_corpus(
    folder: Path, out_dir: Path, label: str, engine: str, raw_texts: int, queries: int, embedding: str = "model"
) -> dict[str, Any]:
    """In a worker process: ingest ``folder``, embed the same texts raw, time searches (module doc)."""
    import psutil

    from semray.catalog.document_pipeline import EMBED_CHARS, local_embedder
    from semray.catalog.ingest import add_server
    from semray.catalog.retrieval import ANN_MIN_ROWS
    from semray.catalog.store import Catalog
    from semray.serving.profiles import resolve_serving
    from semray.settings import Settings

    state = out_dir / f"state-{label}"
    shutil.rmtree(state, ignore_errors=True)
    settings = Settings(state_dir=state)
    embedder = local_embedder(resolve_serving(settings.models).embedding)
    embedder.embed(["warm up the model"])
    import lancedb  # noqa: F401  # like the model, loaded before the clock: its import is 2-3 CPU-seconds per process

    rss_loaded = psutil.Process().memory_info().rss
    if embedding == "simulated":  # the in-process embedder is this cached instance: the ingest calls this instead
        embedder.embed = simulated_embed(embedder.embedder.dimension)  # type: ignore[method-assign]
    model = _EmbedClock(embedder.embed)
    embedder.embed = model  # type: ignore[method-assign]
    load_at_start = os.getloadavg()[0]
    started, cpu_started = time.perf_counter(), time.process_time()
    with rss_peak() as peak:
        report = add_server(settings, str(folder), name="corpus", engine=engine)  # type: ignore[arg-type]
    ingest_s, ingest_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    model_cpu_s, model_texts = model.cpu_s, model.texts
    load_at_ingest_end = os.getloadavg()[0]
    catalog = Catalog.open(settings)
    texts = sorted(
        {text[:EMBED_CHARS] for text in catalog.rows("segments", columns=["text"]).column("text").to_pylist()}
    )
    step = max(1, len(texts) // raw_texts)
    subset = texts[::step][:raw_texts] if embedding == "model" else []
    started, cpu_started = time.perf_counter(), time.process_time()
    embedder.embedder.embed(subset)
    raw_s, raw_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    raw_rate = len(subset) / raw_s if subset else None
    raw_cpu_rate = len(subset) / raw_cpu_s if subset else None
    embeddings = len(texts) + len(report.datasets)  # every distinct segment text, plus one profile per dataset
    return {
        "embedding": embedding,
        "documents": report.documents_read,
        "skipped": len(report.skipped),
        "segments": report.segments,
        "segments_per_document": round(report.segments / max(1, report.documents_read), 2),
        "distinct_texts": len(texts),
        "ann_index": report.segments >= ANN_MIN_ROWS,
        "ingest_s": round(ingest_s, 1),
        "documents_per_s": round(report.documents_read / ingest_s, 1),
        "segments_per_s": round(report.segments / ingest_s, 1),
        "embeddings_per_s": round(embeddings / ingest_s, 1),
        "raw_texts": len(subset),
        "raw_embeddings_per_s": round(raw_rate, 1) if raw_rate else None,
        "ratio_to_raw": round(embeddings / ingest_s / raw_rate, 3) if raw_rate else None,
        # CPU seconds of this process (all its threads): what the ingest and the raw call cost whatever else
        # ran on the machine meanwhile; the local engine only (Ray's actors are other processes).
        "ingest_cpu_s": round(ingest_cpu_s, 1),
        "cpu_ratio_to_raw": (
            round(embeddings / ingest_cpu_s / raw_cpu_rate, 3) if engine == "local" and raw_cpu_rate else None
        ),
        # the ingest's CPU split (local engine): inside the embedder's calls (the model, or the simulated vectors)
        # and the rest; the model's CPU per text in the ingest against the raw call's says whether the ingest
        # feeds the model as well as one sorted call does, the rest is what the ingest adds
        "ingest_model_cpu_s": round(model_cpu_s, 1) if engine == "local" else None,
        "ingest_other_cpu_s": round(ingest_cpu_s - model_cpu_s, 1) if engine == "local" else None,
        "ingest_model_texts": model_texts if engine == "local" else None,
        "ingest_model_cpu_ms_per_text": (
            round(1000 * model_cpu_s / model_texts, 2) if engine == "local" and model_texts else None
        ),
        "raw_cpu_ms_per_text": round(1000 / raw_cpu_rate, 2) if raw_cpu_rate else None,
        "load_1min": [round(load_at_start, 2), round(load_at_ingest_end, 2), round(os.getloadavg()[0], 2)],
        "rss_model_loaded_mib": round(rss_loaded / MIB, 1),
        "rss_ingest_peak_mib": round(peak[0] / MIB, 1),
        "search": search_latency(catalog, texts, embedder, queries),
    }


class _EmbedClock:
    """The embedder's ``embed`` with the CPU seconds (all threads of the process) and texts of its calls counted."""

    def __init__(self, embed: Any) -> None:
        self.embed, self.cpu_s, self.texts = embed, 0.0, 0

    def __call__(self, texts: Sequence[str]) -> Any:
        started = time.process_time()
        try:
            return self.embed(texts)
        finally:
            self.cpu_s += time.process_time() - started
            self.texts += len(texts)


def search_latency(catalog: Any, texts: Sequence[str], embedder: Any, count: int) -> dict[str, dict[str, float]]:
    """p50/p95 milliseconds of ``count`` k=10 segment searches per mode, queries embedded beforehand."""
    from semray.catalog.search import search_segments

    rng = random.Random(1)
    queries = [" ".join(rng.choice(texts).split()[:6]) for _ in range(count)]
    vectors = embedder.embed(queries)
    table = catalog.table("segments")
    found: dict[str, dict[str, float]] = {}
    for mode in MODES:
        timings = []
        for query, vector in zip(queries, vectors, strict=True):
            watch = time.perf_counter()
            search_segments(table, query, vector, k=10, mode=mode)
            timings.append(time.perf_counter() - watch)
        ordered = sorted(timings)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        found[mode] = {"p50_ms": round(statistics.median(timings) * 1000, 1), "p95_ms": round(p95 * 1000, 1)}
    found["vector"]["recall_at_10"] = ann_recall(table, queries, vectors)
    return found


def ann_recall(table: Any, queries: Sequence[str], vectors: Any, k: int = 10) -> float:
    """Mean share of the exact top ``k`` (cosine, every row compared: ``bypass_vector_index``) that vector search
    (``search_segments``, through the ANN index when one was built) finds: 1.0 without an index."""
    from semray.catalog.search import search_segments
    from semray.catalog.shards import tables_of

    shares = []
    for query, vector in zip(queries, vectors, strict=True):
        ranked = []
        for shard in tables_of(table):
            exact = shard.search(vector).distance_type("cosine").bypass_vector_index()
            exact = exact.select(["segment_id", "_distance"]).limit(k)  # _distance named: no deprecation warning
            ranked += exact.to_arrow().to_pylist()
        truth = {row["segment_id"] for row in sorted(ranked, key=lambda row: row["_distance"])[:k]}
        found = {hit.segment_id for hit in search_segments(table, query, vector, k=k, mode="vector")}
        shares.append(len(truth & found) / max(1, len(truth)))
    return round(statistics.mean(shares), 3) if shares else 1.0


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    started_at, load_before = now_iso(), load_average()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    corpora: dict[str, Path] = {}
    for count in args.docs:
        corpora[f"generated-{count}"] = generate_documents(
            args.out_dir / f"{args.shape}-{count}", count, shape=args.shape
        )
    if args.shared:
        corpora.update(shared_corpora(args.out_dir))
    results: dict[str, Any] = {}
    for label, folder in corpora.items():
        worker = [sys.executable, "-m", "benchmarks.ingest", "--worker", label, "--folder", str(folder)]
        worker += ["--out-dir", str(args.out_dir), "--engine", args.engine]
        worker += ["--raw-texts", str(args.raw_texts), "--queries", str(args.queries), "--embedding", args.embedding]
        environment = {**os.environ, "HF_HUB_OFFLINE": "1"}
        process = subprocess.Popen(worker, stdout=subprocess.PIPE, env=environment, text=True)
        with MemorySampler(root_pid=process.pid, object_store=False) as sampler:
            stdout, _ = process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"the ingest worker for {label} failed (exit {process.returncode})")
        figures = json.loads(stdout.strip().splitlines()[-1])
        figures["pss_peak_mib"] = round(sampler.peak().pss_bytes / MIB, 1)
        figures["processes_peak"] = sampler.peak().processes
        results[label] = figures
        # each corpus's figures as soon as they are known: a long run stopped later still leaves them in its log
        print(json.dumps({"corpus": label, **figures}), file=sys.stderr, flush=True)
    result_figures = {
        "engine": args.engine,
        "shape": args.shape,
        "embedding": args.embedding,
        "corpora": results,
        "cpus": os.cpu_count(),
    }
    simulated = args.embedding == "simulated"
    return BenchmarkResult(
        name=SIMULATED_NAME if simulated else NAME,  # its own section: never in place of a real-model result
        title=(
            "Catalog ingest memory by corpus size, simulated embedding (no model work)"
            if simulated
            else "Catalog ingest vs raw embedding throughput, memory and search latency by corpus size"
        ),
        command=command,
        parameters={key: value for key, value in vars(args).items() if key not in ("results_dir", "out_dir", "worker")},
        figures=result_figures,
        markdown=_markdown(result_figures),
        started_at=started_at,
        load_before=load_before,
    )


def _markdown(figures: dict[str, Any]) -> str:
    shape = {
        "notes": "short markdown notes (`# <three words>`, one paragraph of 12-20 words; 4 segments, 3 distinct texts)",
        "sections": "markdown documents (a title, three sections of one or two paragraphs of 30-60 words)",
        "lines": "one-sentence text files (6-10 words; 2 segments, 1 distinct text)",
    }[figures["shape"]]
    simulated = figures.get("embedding") == "simulated"
    lines = [
        *(
            [
                "**Simulated embedding** (`--embedding simulated`): the model is loaded but the ingest's vectors are "
                "seeded by each text's hash, not computed: the memory figures are an ingest's, the throughputs are "
                "not (no raw throughput, no ratio).",
                "",
            ]
            if simulated
            else []
        ),
        f"Generated corpora: {shape}; shared: the Enron emails and the medical symptom texts, one file each. "
        f"`add_server` into an empty catalog, engine `{figures['engine']}`, all-MiniLM-L6-v2 already loaded, "
        f"{figures['cpus']} CPUs; raw = the same embedder on the distinct segment texts in one call, in the same "
        "worker right after its ingest. Embeddings = distinct texts (the ingest embeds each distinct text of a batch "
        "once). The machine is shared (see the 1-minute loads at the ingest's start, its end and the worker's end): "
        "throughputs are lower bounds, the ratio to raw is the figure that matters; the CPU ratio compares "
        "embeddings per CPU-second of the worker (ingest vs raw call), which other work on the machine skews less "
        "(the model's CPU per text still grows with the load). Model / other CPU s: the ingest's CPU seconds inside "
        "the embedder's calls and outside them.",
        "",
        "| corpus | documents | segments | distinct texts | ANN | ingest s | docs/s | segments/s | embeddings/s "
        "| raw embeddings/s | ratio | CPU ratio | model / other CPU s | RSS model MiB | RSS ingest peak MiB "
        "| PSS peak MiB | load 1 min |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, row in figures["corpora"].items():
        lines.append(
            f"| {label} | {row['documents']} | {row['segments']} | {row['distinct_texts']} | "
            f"{'yes' if row['ann_index'] else 'no'} | {row['ingest_s']} | {row['documents_per_s']} | "
            f"{row['segments_per_s']} | {row['embeddings_per_s']} | {_cell(row['raw_embeddings_per_s'])} | "
            f"{_cell(row['ratio_to_raw'])} | {_cell(row['cpu_ratio_to_raw'])} | "
            f"{_cell(row.get('ingest_model_cpu_s'))} / {_cell(row.get('ingest_other_cpu_s'))} | "
            f"{row['rss_model_loaded_mib']} | {row['rss_ingest_peak_mib']} | "
            f"{row['pss_peak_mib']} | {', '.join(str(value) for value in row['load_1min'])} |"
        )
    lines += [
        "",
        "Search latency in the catalog just built (`search_segments`, k=10, one call, the query embedded beforehand):",
        "",
        "| corpus | " + " | ".join(f"{mode} p50 / p95 ms" for mode in MODES) + " | vector recall@10 vs exact |",
        "| --- | " + " | ".join("---" for _ in MODES) + " | --- |",
    ]
    for label, row in figures["corpora"].items():
        cells = [f"{row['search'][mode]['p50_ms']} / {row['search'][mode]['p95_ms']}" for mode in MODES]
        cells.append(_cell(row["search"]["vector"].get("recall_at_10")))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser(NAME, __doc__ or NAME)
    parser.add_argument("--docs", type=int, nargs="*", default=[10000], help="generated corpus sizes (up to 100000)")
    parser.add_argument("--shape", choices=SHAPES, default="notes", help="generated documents (module doc)")
    parser.add_argument("--shared", action="store_true", help="also the shared Enron and medical corpora")
    parser.add_argument("--engine", choices=("local", "ray"), default="local", help="ingest engine (default local)")
    parser.add_argument(
        "--embedding",
        choices=("model", "simulated"),
        default="model",
        help="simulated: hash-seeded vectors instead of the model, for memory at large sizes (module doc)",
    )
    parser.add_argument("--raw-texts", type=int, default=20000, help="texts embedded for the raw throughput")
    parser.add_argument("--queries", type=int, default=50, help="searches per mode for the latency")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(arguments)
    if args.worker is not None:
        figures = measure_corpus(
            args.folder, args.out_dir, args.worker, args.engine, args.raw_texts, args.queries, args.embedding
        )
        sys.stdout.write(json.dumps(figures) + "\n")
        return 0
    return run_benchmark(NAME, parser, body, arguments)


if __name__ == "__main__":
    sys.exit(main())
