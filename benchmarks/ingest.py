"""Catalog ingest throughput and memory on generated markdown documents, against raw embedding throughput.

    .venv/bin/python -m benchmarks.ingest [--docs 2000 10000] [--engine local|ray]

For each size, a fresh worker process (so each size's memory peak is its own) generates or reuses
``N`` markdown documents (a title, three ``##`` sections of one or two paragraphs of common
English words; deterministic), registers the folder with ``catalog.ingest.add_server`` into an
empty catalog (hash, profile, read + segment + embed, stage, publish, build indexes) and times it
with the embedding model already loaded. Then the same process embeds exactly the texts the ingest
embedded (every segment's text cut to ``EMBED_CHARS``) with the same ``SentenceEmbedder`` in one
call (sentence-transformers batches and length-sorts them itself): that is the raw throughput of
the model on this machine, up to ``--raw-texts`` of them (an evenly spaced subset beyond).

Reported per size: documents/s, segments/s, embeddings/s of the whole ingest, raw embeddings/s,
their ratio (goal >= 0.8), and memory of the worker's process tree: peak PSS sum (sampled every
0.2 s from outside), peak RSS of the worker (``ru_maxrss``), and the RSS once the model was
loaded, so growth with the corpus shows apart from the model.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchmarkResult, MemorySampler, benchmark_parser, load_average, now_iso, run_benchmark

NAME = "ingest"
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


def generate_documents(folder: Path, count: int, seed: int = 0) -> Path:
    """``count`` markdown documents in ``folder`` (kept and reused when already complete)."""
    marker = folder.parent / f"{folder.name}.complete"  # outside the folder: the ingest would list it
    if marker.is_file() and marker.read_text() == str(count):
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    rng = random.Random(seed)
    for number in range(count):
        shard = folder / f"{number // 1000:03d}"
        shard.mkdir(parents=True, exist_ok=True)
        parts = [f"# Document {number}: {' '.join(rng.sample(WORDS, 3))}", ""]
        for section in range(3):
            parts += [f"## Section {section} {rng.choice(WORDS)}", ""]
            for _ in range(rng.randint(1, 2)):
                parts += [" ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 60))).capitalize() + ".", ""]
        (shard / f"doc{number:06d}.md").write_text("\n".join(parts), encoding="utf-8")
    marker.write_text(str(count))
    return folder


def measure_size(count: int, out_dir: Path, engine: str, raw_texts: int) -> dict[str, Any]:
    """In a worker process: ingest ``count`` documents, then embed the same texts raw (module doc)."""
    from semray.catalog.document_pipeline import EMBED_CHARS, local_embedder
    from semray.catalog.ingest import add_server
    from semray.catalog.store import Catalog
    from semray.serving.profiles import resolve_serving
    from semray.settings import Settings

    folder = generate_documents(out_dir / f"docs-{count}", count)
    state = out_dir / f"state-{count}"
    shutil.rmtree(state, ignore_errors=True)
    settings = Settings(state_dir=state)
    embedder = local_embedder(resolve_serving(settings.models).embedding)
    embedder.embed(["warm up the model"])
    rss_loaded = _rss()
    load_at_start = os.getloadavg()[0]
    started = time.perf_counter()
    report = add_server(settings, str(folder), name="generated", engine=engine)  # type: ignore[arg-type]
    ingest_s = time.perf_counter() - started
    segments = Catalog.open(settings).rows("segments", columns=["text"]).column("text").to_pylist()
    texts = [text[:EMBED_CHARS] for text in segments]
    step = max(1, len(texts) // raw_texts)
    subset = texts[::step][:raw_texts]
    started = time.perf_counter()
    embedder.embedder.embed(subset)
    raw_s = time.perf_counter() - started
    raw_rate = len(subset) / raw_s
    embeddings = report.segments + len(report.datasets)  # every segment, plus one profile per dataset
    return {
        "documents": report.documents_read,
        "segments": report.segments,
        "segments_per_document": round(report.segments / max(1, report.documents_read), 2),
        "ingest_s": round(ingest_s, 2),
        "documents_per_s": round(report.documents_read / ingest_s, 1),
        "segments_per_s": round(report.segments / ingest_s, 1),
        "embeddings_per_s": round(embeddings / ingest_s, 1),
        "raw_texts": len(subset),
        "raw_embeddings_per_s": round(raw_rate, 1),
        "ratio_to_raw": round(embeddings / ingest_s / raw_rate, 3),
        "load_1min": [round(load_at_start, 2), round(os.getloadavg()[0], 2)],  # ingest start, raw end
        "rss_model_loaded_mib": round(rss_loaded / MIB, 1),
        "rss_peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB, 1),
    }


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    started_at, load_before = now_iso(), load_average()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    sizes: dict[str, Any] = {}
    for count in args.docs:
        worker = [sys.executable, "-m", "benchmarks.ingest", "--worker", str(count), "--out-dir", str(args.out_dir)]
        worker += ["--engine", args.engine, "--raw-texts", str(args.raw_texts)]
        environment = {**os.environ, "HF_HUB_OFFLINE": "1"}
        process = subprocess.Popen(worker, stdout=subprocess.PIPE, env=environment, text=True)
        with MemorySampler(root_pid=process.pid, object_store=False) as sampler:
            stdout, _ = process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"the ingest worker for {count} documents failed (exit {process.returncode})")
        figures = json.loads(stdout.strip().splitlines()[-1])
        figures["pss_peak_mib"] = round(sampler.peak().pss_bytes / MIB, 1)
        figures["processes_peak"] = sampler.peak().processes
        sizes[str(count)] = figures
    result_figures = {"engine": args.engine, "sizes": sizes, "cpus": os.cpu_count()}
    return BenchmarkResult(
        name=NAME,
        title="Catalog ingest of generated markdown documents vs raw embedding throughput",
        command=command,
        parameters={key: value for key, value in vars(args).items() if key not in ("results_dir", "out_dir", "worker")},
        figures=result_figures,
        markdown=_markdown(result_figures),
        started_at=started_at,
        load_before=load_before,
    )


def _markdown(figures: dict[str, Any]) -> str:
    lines = [
        f"Generated markdown documents (title, three sections of one or two paragraphs), `add_server` into an empty "
        f"catalog, engine `{figures['engine']}`, all-MiniLM-L6-v2 already loaded; raw = the same embedder on the "
        "same segment texts in one call. Each size runs in its own process; PSS is the process tree's peak, "
        "RSS the worker's. The machine is shared and loaded (see the load averages): throughputs are lower "
        "bounds, the ratio to raw is the figure that matters.",
        "",
        "| documents | segments | ingest s | docs/s | segments/s | embeddings/s | raw embeddings/s | ratio "
        "| RSS model loaded MiB | RSS peak MiB | PSS peak MiB | load 1 min (start, end) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in figures["sizes"].values():
        lines.append(
            f"| {row['documents']} | {row['segments']} | {row['ingest_s']} | {row['documents_per_s']} | "
            f"{row['segments_per_s']} | {row['embeddings_per_s']} | {row['raw_embeddings_per_s']} | "
            f"{row['ratio_to_raw']} | {row['rss_model_loaded_mib']} | {row['rss_peak_mib']} | {row['pss_peak_mib']} | "
            f"{row['load_1min'][0]}, {row['load_1min'][1]} |"
        )
    return "\n".join(lines)


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser(NAME, __doc__ or NAME)
    parser.add_argument("--docs", type=int, nargs="+", default=[2000, 10000], help="corpus sizes (up to 100000)")
    parser.add_argument("--engine", choices=("local", "ray"), default="local", help="ingest engine (default local)")
    parser.add_argument("--raw-texts", type=int, default=20000, help="texts embedded for the raw throughput")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(arguments)
    if args.worker is not None:
        figures = measure_size(args.worker, args.out_dir, args.engine, args.raw_texts)
        sys.stdout.write(json.dumps(figures) + "\n")
        return 0
    return run_benchmark(NAME, parser, body, arguments)


if __name__ == "__main__":
    sys.exit(main())
