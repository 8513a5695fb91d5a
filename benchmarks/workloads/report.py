"""Markdown tables of workload rows: quality, calls and tokens per tier, dollars, time, memory."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

GIB = 1 << 30


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def cost_table(rows: Sequence[dict[str, Any]], quality: Callable[[dict[str, Any]], str], quality_header: str) -> str:
    """One line per system run: quality, per-tier calls/tokens, dollars, wall time, memory, no-match rate."""
    lines = [
        f"| system | {quality_header} | small calls / tokens | large calls / tokens | sim. $ | wall s | peak PSS GiB "
        "(object store) | no-match |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if "simulator" not in row:
            lines.append(f"| {row['system']} ({row['config']}) | {row.get('error', 'did not run')} | | | | | | |")
            continue
        sim = row["simulator"]
        tiers = sim["tiers"]

        def tier(name: str, tiers: dict[str, Any] = tiers) -> str:
            usage = tiers.get(name)
            if not usage:
                return "0"
            return f"{usage['calls']} / {usage['prompt_tokens'] + usage['completion_tokens']:,}"

        memory = f"{row['peak_pss_bytes'] / GIB:.2f}"
        if row.get("object_store_peak_bytes") is not None:
            memory += f" ({row['object_store_peak_bytes'] / GIB:.3f})"
        lines.append(
            f"| {row['system']} ({row['config']}) | {quality(row)} | {tier('small')} | {tier('large')} | "
            f"{sim['cost_usd']:.4f} | {row['wall_s']:.1f} | {memory} | {sim['no_match_rate']:.3f} |"
        )
    return "\n".join(lines)


def gaps(rows: Sequence[dict[str, Any]]) -> str:
    """What each system could not express or run, and why; empty when nothing is missing."""
    lines = []
    for row in rows:
        label = f"{row['system']} ({row['config']})"
        for step, reason in sorted(row.get("unsupported", {}).items()):
            lines.append(f"- {label}, `{step}`: cannot express — {reason}")
        for step, reason in sorted(row.get("errors", {}).items()):
            lines.append(f"- {label}, `{step}`: failed — {reason[:300]}")
        if row.get("error"):
            lines.append(f"- {label}: {row['error']}")
        for step, note in sorted(row.get("notes", {}).items()):
            lines.append(f"- {label}, `{step}` (note): {note}")
    return "\n".join(lines)


def usage_of(row: dict[str, Any], step: str) -> dict[str, Any] | None:
    """A step's calls, tokens, dollars and calls per tier: the simulator's /stats snapshots taken
    after each step (every system over HTTP), else semray's own accounting (in-process runs)."""
    usage: dict[str, Any] | None = row.get("step_usage", {}).get(step)
    if usage:
        return usage
    own = row.get("semray_usage", {}).get(step) if row["system"] == "semray" else None
    if not own:
        return None
    return {
        "calls": own["calls"],
        "tokens": own["tokens_in"] + own["tokens_out"],
        "cost_usd": own["dollars"],
        "tiers": {"small" if row["config"] == "small" else "large": {"calls": own["calls"]}},
    }


def missing_reason(row: dict[str, Any], step: str, otherwise: str = "–") -> str:
    """Why a row has no figures for a step: the system cannot express it, it failed, or ``otherwise``.

    >>> missing_reason({"unsupported": {"self_join": "n x n"}}, "self_join"), missing_reason({}, "x", "did not run")
    ('cannot express', 'did not run')
    """
    if step in row.get("unsupported", {}):
        return "cannot express"
    if step in row.get("errors", {}):
        return "failed"
    return otherwise


def gaps_section(rows: Sequence[dict[str, Any]], what: str = "step") -> list[str]:
    """The closing paragraph of a workload's section: :func:`gaps` under its heading, or nothing.

    >>> gaps_section([{"system": "lotus", "config": "plain", "error": "not installed"}], "query")[0]
    'Where a system could not run a query, and why; notes:'
    """
    missing = gaps(rows)
    return [f"Where a system could not run a {what}, and why; notes:", "", missing] if missing else []


def estimate_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """semray's cost-model estimate of each step's plan beside what the step paid.

    >>> estimate_lines([{"system": "semray", "config": "default", "semray_usage": {"pipeline": {
    ...     "dollars": 1.0, "estimated_dollars": [0.5, 0.9, 1.2], "tiers": ["large"]}}}])[2]
    '| semray (default) | pipeline | large | 0.900 [0.500, 1.200] | 1.000 | -10% | yes |'
    """
    lines = [
        "| run | step | tiers | estimated $ [interval] | paid $ | error | inside |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if row["system"] != "semray":
            continue
        for step, usage in (row.get("semray_usage") or {}).items():
            if not usage or "estimated_dollars" not in usage:
                continue
            low, value, high = usage["estimated_dollars"]
            paid = usage["dollars"]
            error = f"{(value - paid) / paid:+.0%}" if paid else "–"
            inside = "yes" if low <= paid <= high else "no"
            lines.append(
                f"| semray ({row['config']}) | {step} | {', '.join(usage.get('tiers', []))} | "
                f"{value:.3f} [{low:.3f}, {high:.3f}] | {paid:.3f} | {error} | {inside} |"
            )
    return lines if len(lines) > 2 else []


QUALITY_SLACK = 0.02
TOKEN_SHARE = 0.2


def goal_lines(
    rows: Sequence[dict[str, Any]],
    what: str,
    metric: Callable[[dict[str, Any]], float | None],
    tokens: Callable[[dict[str, Any]], int | None],
    dollars: Callable[[dict[str, Any]], float | None] | None = None,
) -> list[str]:
    """The issue's goal for one quality figure: each semray run against the best peer run.

    Goal: quality within ``QUALITY_SLACK`` of the best peer's at no more than ``TOKEN_SHARE``
    of that peer's tokens. The best peer run is the one with the highest quality (fewest
    tokens among equals).
    """
    peers = [row for row in rows if row["system"] != "semray" and metric(row) is not None and tokens(row)]
    ours = [row for row in rows if row["system"] == "semray"]
    if not peers:
        return [f"- {what}: no peer result to compare with."]
    best = max(peers, key=lambda row: (metric(row) or 0.0, -(tokens(row) or 0)))
    best_quality, best_tokens = metric(best) or 0.0, tokens(best) or 0
    label = f"{best['system']} ({best['config']})"
    lines = []
    for row in ours:
        quality, used = metric(row), tokens(row)
        name = f"semray ({row['config']})"
        if quality is None or not used:
            lines.append(f"- {what}: {name} has no result; best peer {label} {best_quality:.3f}.")
            continue
        share = used / best_tokens
        met = quality >= best_quality - QUALITY_SLACK and share <= TOKEN_SHARE
        why = (
            "met"
            if met
            else "NOT met ("
            + ", ".join(
                reason
                for reason, failed in (
                    ("quality", quality < best_quality - QUALITY_SLACK),
                    ("tokens", share > TOKEN_SHARE),
                )
                if failed
            )
            + ")"
        )
        spent = dollars(row) if dollars else None
        best_spent = dollars(best) if dollars else None
        money = f" and {spent / best_spent:.2f}x its dollars" if spent is not None and best_spent else ""
        lines.append(
            f"- {what}: {name} {quality:.3f} vs best peer {label} {best_quality:.3f} "
            f"({quality - best_quality:+.3f}) at {share:.2f}x its tokens{money} — {why}."
        )
    return lines


def versions_line(rows: Sequence[dict[str, Any]]) -> str:
    """The systems' versions as their runners reported them, e.g. ``semray 0.1.0, lotus-ai 1.2.4``."""
    versions = sorted({row["version"] for row in rows if row.get("version")})
    return "Systems: " + (", ".join(versions) if versions else "versions not reported") + "."


def rerender(results_dir: Path, name: str, render: Callable[[dict[str, Any]], str]) -> int:
    """Rebuild a stored result's section (and RESULTS.md) from its rows, without rerunning anything."""
    from benchmarks.harness import regenerate_report

    path = results_dir / f"{name}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["markdown"] = render(data)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    sys.stderr.write(f"{name}: re-rendered {regenerate_report(results_dir)}\n")
    return 0
