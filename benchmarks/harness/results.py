"""Results files: one ``results/NAME.json`` per benchmark, and RESULTS.md regenerated from all of them.

Each benchmark owns one section of RESULTS.md. The section is stored (as Markdown) in the
benchmark's JSON together with the raw figures, so regenerating RESULTS.md needs no
benchmark code and never touches another benchmark's numbers. What a person writes about a
section (a re-measurement by hand, a reading of the figures) goes in ``notes/NAME.md``, which
regeneration appends to that section instead of dropping it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.harness import environment

BENCHMARKS_DIR = Path(__file__).resolve().parents[1]
RESULTS_DIR = BENCHMARKS_DIR / "results"
NOTES_DIR = BENCHMARKS_DIR / "notes"
SCHEMA_VERSION = 1

HEADER = """# Benchmark results

Generated from `benchmarks/results/*.json` by the benchmarks themselves (or by
`python -m benchmarks.harness` alone); do not edit by hand: rerun the command shown in a
section to refresh it; notes written by hand live in `benchmarks/notes/NAME.md` and are appended
to their section. Each section records when and where it ran. The machine may have been
shared with other work: compare figures within a section, and read the load average.
"""


@dataclass(frozen=True)
class BenchmarkResult:
    """What one benchmark run reports; ``markdown`` is its section of RESULTS.md."""

    name: str
    title: str
    command: str
    parameters: dict[str, Any]
    figures: dict[str, Any]
    markdown: str
    started_at: str
    load_before: list[float]
    machine: dict[str, Any] = field(default_factory=environment.machine)
    packages: dict[str, str | None] = field(default_factory=environment.package_versions)
    git: dict[str, Any] = field(default_factory=environment.git_state)
    finished_at: str = field(default_factory=lambda: now_iso())
    load_after: list[float] = field(default_factory=environment.load_average)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "name": self.name,
            "title": self.title,
            "command": self.command,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "load_average": {"before": self.load_before, "after": self.load_after},
            "machine": self.machine,
            "packages": self.packages,
            "git": self.git,
            "parameters": self.parameters,
            "figures": self.figures,
            "markdown": self.markdown,
        }


def now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def write_result(result: BenchmarkResult, results_dir: Path = RESULTS_DIR) -> Path:
    """Write ``results_dir/NAME.json`` atomically, then regenerate the RESULTS.md beside ``results_dir``."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{result.name}.json"
    _write_atomically(path, json.dumps(result.to_json(), indent=2, sort_keys=False) + "\n")
    regenerate_report(results_dir)
    return path


def regenerate_report(results_dir: Path = RESULTS_DIR) -> Path:
    """Rebuild ``RESULTS.md`` (next to ``results_dir``) from every ``*.json`` in ``results_dir``.

    A section's hand-written notes are read from ``notes/NAME.md`` beside ``results_dir``.
    """
    notes_dir = results_dir.parent / NOTES_DIR.name
    sections = [
        render_section(json.loads(path.read_text(encoding="utf-8")), notes_dir)
        for path in sorted(results_dir.glob("*.json"))
    ]
    report = results_dir.parent / "RESULTS.md"
    body = HEADER + ("\n" + "\n".join(sections) if sections else "\nNo results yet.\n")
    _write_atomically(report, body)
    return report


def render_section(data: dict[str, Any], notes_dir: Path = NOTES_DIR) -> str:
    """The RESULTS.md section of one results file: a standard header, the benchmark's Markdown, then its notes."""
    machine = data.get("machine", {})
    memory_gib = machine.get("memory_bytes", 0) / (1 << 30)
    packages = ", ".join(f"{name} {version}" for name, version in data.get("packages", {}).items() if version)
    load = data.get("load_average", {})
    git = data.get("git", {})
    commit = (git.get("commit") or "unknown")[:12] + (" (uncommitted changes)" if git.get("dirty") else "")
    lines = [
        f"## {data['title']} (`{data['name']}`)",
        "",
        f"- command: `{data['command']}`",
        f"- ran: {data['started_at']} to {data['finished_at']} at commit {commit}",
        f"- machine: {machine.get('cpu_model', 'unknown')}, {machine.get('logical_cores')} logical cores, "
        f"{memory_gib:.1f} GiB memory, {machine.get('os', '')}, Python {machine.get('python', '')}",
        f"- load average (1/5/15 min): before {_load(load.get('before'))}, after {_load(load.get('after'))}",
        f"- packages: {packages}",
        "",
        data["markdown"].strip(),
        "",
    ]
    notes = notes_dir / f"{data['name']}.md"
    if notes.is_file():
        lines += [notes.read_text(encoding="utf-8").strip(), ""]
    return "\n".join(lines)


def _load(values: list[float] | None) -> str:
    return " / ".join(f"{value:.2f}" for value in values) if values else "unknown"


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
