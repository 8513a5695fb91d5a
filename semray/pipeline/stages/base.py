"""The base of every physical stage, and the text EXPLAIN shows of a physical plan.

A stage says *how* (a SQL statement per batch, a hash-partitioned SQL step, a Ray join, an actor
pool asking a model); the logical plan said *what*. Stages are plain values, snapshot-testable
without a cluster; ``pipeline/lowering`` makes them, ``pipeline/ray`` runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Stage:
    """Base of physical stages; ``inputs`` are the upstream stages; ``operators`` the keys of the
    logical operators whose output is this stage's output (their rows are counted for EXPLAIN)."""

    inputs: tuple[Stage, ...] = field(default=(), kw_only=True)
    operators: tuple[str, ...] = field(default=(), kw_only=True)

    def describe(self) -> str:
        return type(self).__name__


def render_stages(stage: Stage, depth: int = 0) -> str:
    """Indented text of a physical plan, root first."""
    lines = ["  " * depth + stage.describe()]
    lines.extend(render_stages(child, depth + 1) for child in stage.inputs)
    return "\n".join(lines)
