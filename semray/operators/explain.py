"""Render a plan tree as indented text for EXPLAIN."""

from __future__ import annotations

from collections.abc import Callable

from semray.operators.base import Node


def render_tree(node: Node, annotate: Callable[[Node], str] | None = None) -> str:
    """One line per operator, children indented under parents.

    >>> print(render_tree(plan))  # doctest: +SKIP
    Filter rating >= 4
    └─ Scan csv:reviews.csv
    """
    lines: list[str] = []

    def visit(current: Node, prefix: str, connector: str) -> None:
        extra = annotate(current) if annotate else ""
        lines.append(f"{prefix}{connector}{current.label()}{extra}")
        children = current.children
        child_prefix = prefix + ("   " if connector == "└─ " else "│  " if connector else "")
        for position, child in enumerate(children):
            visit(child, child_prefix, "└─ " if position == len(children) - 1 else "├─ ")

    visit(node, "", "")
    return "\n".join(lines)
