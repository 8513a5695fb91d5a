"""Operator paths: how the cost model and the optimizer name one operator of a plan.

A path is the dotted chain of child fields from the root, ``""`` for the root itself:
``"input.input"`` is the root's input's input; a tuple child field adds its position
(``"inputs.1"``); a join's children are ``"left"`` and ``"right"``.

>>> from semray.operators import Filter, Scan, Schema, SourceSpec
>>> scan = Scan(source=SourceSpec(kind="memory", options={"name": "t"}), source_schema=Schema.of(("x", "BIGINT")))
>>> sorted(operator_paths(Filter(input=scan, predicate="x > 1")))
['', 'input']
"""

from __future__ import annotations

from collections.abc import Callable

from semray.operators.base import Node


def child_paths(node: Node, path: str) -> list[tuple[str, Node]]:
    """Each child of ``node`` with its path, in ``children`` order."""
    pairs: list[tuple[str, Node]] = []
    for name in node.child_fields:
        value = getattr(node, name)
        if isinstance(value, tuple):
            pairs.extend((join_path(path, f"{name}.{position}"), child) for position, child in enumerate(value))
        else:
            pairs.append((join_path(path, name), value))
    return pairs


def join_path(path: str, step: str) -> str:
    return f"{path}.{step}" if path else step


def operator_paths(plan: Node) -> dict[str, Node]:
    """Every operator of ``plan`` by path, parents before children."""
    found: dict[str, Node] = {}

    def visit(node: Node, path: str) -> None:
        found[path] = node
        for child_path, child in child_paths(node, path):
            visit(child, child_path)

    visit(plan, "")
    return found


def rewrite_at_paths(plan: Node, rewrites: dict[str, Callable[[Node], Node]]) -> Node:
    """Apply ``rewrites[path]`` to the operator at each path (children first)."""

    def visit(node: Node, path: str) -> Node:
        children = tuple(visit(child, child_path) for child_path, child in child_paths(node, path))
        rebuilt = node.with_children(children)
        rewrite = rewrites.get(path)
        return rewrite(rebuilt) if rewrite else rebuilt

    return visit(plan, "")
