"""A driver process for the pipeline SIGKILL test: one attempt of a semantic query written to Parquet.

    pipeline_child.py run STATE DATA OUT [BASELINE_OUT]   write_parquet (resumes an interrupted run)
    pipeline_child.py resume STATE RUN_ID                 ``semray runs resume RUN_ID`` through the CLI
    pipeline_child.py resume-when-free STATE [RUN_ID]     prints ``waiting``, then resumes the run (the
                                                          first under STATE to appear when not given)
                                                          the moment its live driver dies (a quick resume)

The query reads the demo corpus from CSV (so a new process can resume it), keeps positive
reviews and classifies their aspect on a slow simulated tier with the response cache off,
so every row a resume computes again is a paid model call (``PIPELINE_CHILD_LATENCY_S``
sets the tier's seconds per call, 0.02 by default). Each process starts its own local Ray
under STATE. With BASELINE_OUT, the process then writes the same query again to
that path as a new, uninterrupted run. Prints one ``written: {json}`` line per output.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

from semray.api import Query, read_csv
from semray.demo.models import file_serving
from semray.log import configure_logging
from semray.serving.config import ServingConfig
from semray.serving.simulator.config import ModelProfile
from semray.settings import Settings

MARK = "written: "
"""Prefix of the result lines (Ray forwards worker logs to the same standard output)."""
LATENCY_S = float(os.environ.get("PIPELINE_CHILD_LATENCY_S", "0.02"))
"""Latency changes no answer (it is outside the simulator's identity): runs at any latency agree."""
SLOW = ModelProfile(error_rate=0.05, latency_base_s=LATENCY_S, price_in_per_million=2.5, price_out_per_million=10.0)


def child_settings(state: Path) -> Settings:
    # 8-row batches whatever the input's size (batch_max too): dozens of commits, so kills land mid-run.
    return Settings(state_dir=state, semantic_batch_size=8, semantic_batch_max=8, semantic_actors=1, num_cpus=2)


def serving(data: Path) -> ServingConfig:
    """Simulated tiers over the corpus files: a path-based config, so the journal can rebuild it."""
    return file_serving(data, SLOW, "srkill")


def query(data: Path, settings: Settings) -> Query:
    return (
        read_csv(data / "reviews.csv", settings=settings)
        .sem_filter("{review} is positive")
        .sem_classify("Which aspect does {review} discuss?", ["quality", "price", "delivery", "support"], "aspect")
        .with_serving(serving(data))
    )


def main(argv: list[str]) -> int:
    configure_logging("warning")
    mode, state = argv[0], Path(argv[1])
    settings = child_settings(state)
    if mode == "resume":
        from semray.cli_runs import add_runs_commands

        parser = argparse.ArgumentParser(prog="semray")
        add_runs_commands(parser.add_subparsers(required=True))
        args = parser.parse_args(["runs", "resume", argv[2]])
        return int(args.command(args, settings))
    if mode == "resume-when-free":
        return resume_when_free(settings, argv[2] if len(argv) > 2 else None)
    from semray.pipeline.runs.execute import publish_parquet

    data, outputs = Path(argv[2]), [Path(path) for path in argv[3:]]
    plan = query(data, settings)
    for output in outputs:
        written = publish_parquet(plan.plan, settings, output, serving(data))
        line = {"run_id": written.run_id, "rows": written.rows, "attempt_calls": written.attempt_usage.calls}
        sys.stdout.write(MARK + json.dumps(line) + "\n")
        sys.stdout.flush()
    return 0


def resume_when_free(settings: Settings, run_id: str | None) -> int:
    """Everything imported, wait for the run's driver to die, then resume it at once.

    Polls the driver lock (the kernel frees it the moment the driver is killed) and calls
    ``semray.pipeline.runs.execute.resume``, what ``semray runs resume`` executes; a resume that still
    finds the lock held is tried again.
    """
    from semray.pipeline.runs.execute import Written, resume
    from semray.transactions import RunInUseError
    from semray.transactions.durability import is_locked
    from semray.transactions.registry import DRIVER_LOCK, run_dir

    sys.stdout.write("waiting\n")
    sys.stdout.flush()
    while run_id is None:
        runs = sorted((settings.state_path / "runs").glob("2*/" + DRIVER_LOCK))
        if runs and is_locked(runs[0]):
            run_id = runs[0].parent.name
        time.sleep(0.002)
    lock = run_dir(settings, run_id) / DRIVER_LOCK
    while True:
        while is_locked(lock):
            time.sleep(0.002)
        try:
            written = resume(settings, run_id)
        except RunInUseError:
            continue
        assert isinstance(written, Written), "the test's runs write a Parquet output"
        line = {"run_id": written.run_id, "rows": written.rows, "attempt_calls": written.attempt_usage.calls}
        sys.stdout.write(MARK + json.dumps(line) + "\n")
        sys.stdout.flush()
        return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
