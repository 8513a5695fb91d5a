"""Facts about the machine and software a benchmark ran on, recorded next to its numbers."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository root (the folder holding ``benchmarks/`` and ``semray/``)."""

DEFAULT_PACKAGES = ("semray", "ray", "pyarrow", "duckdb", "pandas", "numpy", "polars", "psutil")


def machine() -> dict[str, Any]:
    """CPU model, core counts, memory and OS, e.g. ``{"cpu_model": "AMD EPYC", "logical_cores": 2, ...}``."""
    memory = psutil.virtual_memory()
    return {
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_bytes": memory.total,
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def package_versions(names: tuple[str, ...] = DEFAULT_PACKAGES) -> dict[str, str | None]:
    """Installed distribution versions; ``None`` for a package that is not installed."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (other work on the machine skews timings)."""
    return [round(value, 2) for value in os.getloadavg()]


def git_state() -> dict[str, Any]:
    """The commit the code ran at and whether the tree had uncommitted changes."""
    try:
        commit = _git("rev-parse", "HEAD")
        dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=30)
    return done.stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
