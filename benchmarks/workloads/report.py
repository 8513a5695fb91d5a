"""Markdown tables of workload rows: quality, calls and tokens per tier, dollars, time, memory."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
            lines.append(f"- {label}, `{step}`: {note}")
    return "\n".join(lines)
