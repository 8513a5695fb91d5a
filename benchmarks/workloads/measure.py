"""Run one system's runner in a fresh process and measure it: wall time, peak summed PSS, its JSON answer.

The runner (semray's or a peer's) reads a spec file and prints one JSON object as the last
line of its standard output. Memory is the summed PSS of the runner and all its descendants
(for semray: Ray's GCS, raylet and workers, which it starts), sampled from outside; the
simulator server is not a descendant and is not counted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import MemorySampler

# Offline and loopback-only for every runner: no model hub, no cost-map fetch, no telemetry.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "ANONYMIZED_TELEMETRY": "False",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


@dataclass(frozen=True, slots=True)
class RunnerOutcome:
    """What one runner process did: its JSON answer (None if it printed none), time, memory, exit code."""

    answer: dict[str, Any] | None
    wall_s: float
    peak_pss_bytes: int
    processes: int
    returncode: int
    log_path: str
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def run_measured(
    command: Sequence[str], env: Mapping[str, str], log_path: Path, timeout_s: float, cwd: Path | None = None
) -> RunnerOutcome:
    """Run ``command`` with ``env`` added to this environment; its stderr goes to ``log_path``."""
    full_env = {**os.environ, **OFFLINE_ENV, **env}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        full_env.pop(name, None)  # never route a loopback call through a proxy
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with log_path.open("wb") as log:
        # A session of its own, so a timed-out runner is stopped with everything it started
        # (Ray's GCS, raylet and workers) and nothing is left running on the shared machine.
        process = subprocess.Popen(
            list(command), stdout=subprocess.PIPE, stderr=log, env=full_env, cwd=cwd, start_new_session=True
        )
        with MemorySampler(root_pid=process.pid, object_store=False, interval=0.3) as memory:
            try:
                stdout, _ = process.communicate(timeout=timeout_s)
                error = None
            except subprocess.TimeoutExpired:
                _stop_session(process)
                stdout, _ = process.communicate()
                error = f"timed out after {timeout_s:.0f} s"
    wall = time.perf_counter() - started
    peak = memory.peak()
    answer = _last_json(stdout.decode("utf-8", "replace"))
    if error is None and process.returncode != 0:
        error = f"exit code {process.returncode}; see {log_path}"
    if error is None and answer is None:
        error = f"printed no JSON answer; see {log_path}"
    return RunnerOutcome(
        answer, round(wall, 2), peak.pss_bytes, peak.processes, process.returncode, str(log_path), error
    )


def _stop_session(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the runner's whole session, then SIGKILL whatever is left after 20 s."""
    for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        time.sleep(1.0)  # children of the session may outlive the leader by a moment


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    return None
