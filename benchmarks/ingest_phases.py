"""Where an ingest's CPU goes: one ``add_server`` (engine local, simulated embedding) timed phase by phase.

    .venv/bin/python -m benchmarks.ingest_phases --shape lines --docs 30000

Generates (or reuses) the ``benchmarks.ingest`` corpus of ``--shape`` and ``--docs`` under ``--out-dir``,
loads the model and lancedb (as the ingest benchmark's worker does, before the clock), swaps the
model for ``simulated_embed`` (so every CPU-second measured is the ingest's own, not the model's),
and ingests the folder into an empty catalog with the catalog's functions wrapped in CPU clocks
(``time.process_time``, every thread of the process). Printed: the whole ingest's CPU and wall
seconds, then per phase

1. discovery and hashing (``FolderServer.profile``),
2. reading and segmenting (``DocumentReader``),
3. the embedding dispatch, with the simulated vectors (``SegmentEmbedder``),
4. staging (``DocumentsIngest._take``: file states, the staged parquet),
5. the documents parquet (``_write_documents``) and 6. its profile,
7. the publish, of which 8. the segment indexes (``search.create_segment_indexes``) and 9. the
   datasets index,

and what is left (Catalog.open, the summaries, the change set, progress); with each phase, the RSS peak while it ran
and the RSS at its last end, over the RSS with the model loaded (sampled every 20 ms). A profiling tool, not a
benchmark: it writes no result; ``benchmarks/notes/ingest.md`` quotes its figures with their load.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.ingest import SHAPES, generate_documents, simulated_embed
from benchmarks.vector_index_growth import PeakRss

PHASES = (
    ("semray.catalog.servers.folder", "FolderServer.profile", "1 discovery + hashing", False),
    ("semray.catalog.document_pipeline", "DocumentReader.__call__", "2 reading + segmenting", True),
    ("semray.catalog.document_pipeline", "SegmentEmbedder.__call__", "3 embedding dispatch (simulated vectors)", False),
    ("semray.catalog.document_ingest", "DocumentsIngest._take", "4 staging", False),
    ("semray.catalog.document_ingest", "DocumentsIngest._write_documents", "5 documents parquet", False),
    ("semray.catalog.document_ingest", "DocumentsIngest.profile", "6 documents profile", False),
    ("semray.catalog.store", "Catalog.publish", "7 publish (with 8 and 9)", False),
    ("semray.catalog.search", "create_segment_indexes", "8 segment indexes", False),
    ("semray.catalog.ingest", "_index_datasets", "9 datasets index", False),
)
NESTED = ("8 segment indexes", "9 datasets index")
"""Phases inside the publish: counted in it, left out of the sum of the others."""


def clock_phases(cpu: dict[str, float], wall: dict[str, float], rss: PhaseRss | None = None) -> None:
    """Wrap each phase's function (``PHASES``) so its CPU and wall seconds add up in ``cpu`` and ``wall`` (and
    its RSS is sampled in ``rss``)."""
    import importlib

    for module_name, qualified, label, generator in PHASES:
        module = importlib.import_module(module_name)
        owner: Any = module
        *parents, attribute = qualified.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        setattr(owner, attribute, _clocked(getattr(owner, attribute), label, generator, cpu, wall, rss))


class PhaseRss:
    """The process's RSS (MiB) sampled every 20 ms: its peak while each phase ran, and at the phase's last end."""

    def __init__(self) -> None:
        self.peak: dict[str, float] = defaultdict(float)
        self.after: dict[str, float] = {}
        self._running: dict[str, int] = defaultdict(int)
        threading.Thread(target=self._sample, daemon=True).start()

    now = staticmethod(PeakRss.now)

    def enter(self, label: str) -> None:
        self._running[label] += 1
        self.peak[label] = max(self.peak[label], self.now())

    def leave(self, label: str) -> None:
        self._running[label] -= 1
        self.after[label] = self.now()
        self.peak[label] = max(self.peak[label], self.after[label])

    def _sample(self) -> None:
        while True:
            rss = self.now()
            for label, running in list(self._running.items()):
                if running:
                    self.peak[label] = max(self.peak[label], rss)
            time.sleep(0.02)


def _clocked(
    function: Callable[..., Any],
    label: str,
    generator: bool,
    cpu: dict[str, float],
    wall: dict[str, float],
    rss: PhaseRss | None = None,
) -> Callable[..., Any]:
    @functools.wraps(function)
    def clocked(*args: Any, **kwargs: Any) -> Any:
        started, cpu_started = time.perf_counter(), time.process_time()
        if rss is not None:
            rss.enter(label)
        try:
            # a generator's work happens as it is consumed: consume it here (the ingest iterates it whole anyway)
            return list(function(*args, **kwargs)) if generator else function(*args, **kwargs)
        finally:
            cpu[label] += time.process_time() - cpu_started
            wall[label] += time.perf_counter() - started
            if rss is not None:
                rss.leave(label)

    return clocked


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ingest_phases", description=__doc__)
    parser.add_argument("--shape", choices=SHAPES, default="lines")
    parser.add_argument("--docs", type=int, default=10000)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "out" / "ingest")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from semray.catalog.document_pipeline import local_embedder
    from semray.catalog.ingest import add_server
    from semray.serving.profiles import resolve_serving
    from semray.settings import Settings

    args.out_dir.mkdir(parents=True, exist_ok=True)
    folder = generate_documents(args.out_dir / f"{args.shape}-{args.docs}", args.docs, shape=args.shape)
    state = args.out_dir / f"state-phases-{args.shape}-{args.docs}"
    shutil.rmtree(state, ignore_errors=True)
    settings = Settings(state_dir=state)
    embedder = local_embedder(resolve_serving(settings.models).embedding)
    embedder.embed(["warm up the model"])
    import lancedb  # noqa: F401  # before the clock, as in benchmarks.ingest

    embedder.embed = simulated_embed(embedder.embedder.dimension)  # type: ignore[method-assign]
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    rss = PhaseRss()
    model_rss = rss.now()
    clock_phases(cpu, wall, rss)
    load = os.getloadavg()[0]
    started, cpu_started = time.perf_counter(), time.process_time()
    report = add_server(settings, str(folder), name="corpus", engine="local")
    total_cpu, total_wall = time.process_time() - cpu_started, time.perf_counter() - started
    print(
        f"{args.shape} {args.docs}: {report.segments} segments; ingest {total_cpu:.1f} CPU-s, {total_wall:.1f} s; "
        f"1-minute load {load:.2f} -> {os.getloadavg()[0]:.2f}; RSS with the model {model_rss:.0f} MiB"
    )
    for _module, _name, label, _generator in PHASES:
        peak, after = rss.peak[label] - model_rss, rss.after.get(label, model_rss) - model_rss
        memory = f"RSS peak +{peak:4.0f}, after +{after:4.0f} MiB"
        print(f"  {label:44s} {cpu[label]:6.1f} CPU-s {wall[label]:6.1f} s  {memory}")
    phases = sum(seconds for label, seconds in cpu.items() if label not in NESTED)
    print(f"  {'the rest':44s} {total_cpu - phases:6.1f} CPU-s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
