"""Where an operator sits in a plan: one naming for the cost model and optimizer, one for plan documents.

A **field path** is the dotted chain of child fields from the root, ``""`` for the root itself:
``"input.input"`` is the root's input's input; a tuple child field adds its position
(``"inputs.1"``); a join's children are ``"left"`` and ``"right"``. The cost model keys its
per-operator estimates by it, the optimizer rewrites at it (`operator_paths`, `rewrite_at_paths`).

A **document path** is the JSON path the plan loader names in its errors: ``plan.<op>`` for the
root, then ``.<field>.<op>`` per child (``.inputs.<position>.<op>`` for a Union's inputs), as in
``plan.limit.input.sem_filter.input.scan``. The grammar validator, the fault injector and the
planning agents' span finder name operators this way, over a raw plan document (parsed JSON, not
yet validated: `raw_document_paths`) or over the IR (`document_paths`).

>>> from semray.operators import Filter, Scan, Schema, SourceSpec
>>> scan = Scan(source=SourceSpec(kind="memory", options={"name": "t"}), source_schema=Schema.of(("x", "BIGINT")))
>>> sorted(operator_paths(Filter(input=scan, predicate="x > 1")))
['', 'input']
>>> [path for _, path in document_paths(Filter(input=scan, predicate="x > 1"))]
['plan.filter', 'plan.filter.input.scan']
>>> raw = {"op": "limit", "count": 3, "input": {"op": "scan", "source": {}}}
>>> [path for _, path in raw_document_paths(raw)]
['plan.limit', 'plan.limit.input.scan']
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from semray.operators.base import Node

RAW_CHILD_FIELDS = ("input", "left", "right")
"""The fields of a raw operator that hold one child; ``inputs`` holds a list."""


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


def raw_document_paths(raw: Any, path: str = "plan") -> Iterator[tuple[dict[str, Any], str]]:
    """Every operator dict of a raw plan, root first, with its path; anything without an ``op`` is skipped."""
    if not isinstance(raw, dict) or not isinstance(raw.get("op"), str):
        return
    here = f"{path}.{raw['op']}"
    yield raw, here
    for name in RAW_CHILD_FIELDS:
        if name in raw:
            yield from raw_document_paths(raw[name], f"{here}.{name}")
    if isinstance(raw.get("inputs"), list):
        for position, child in enumerate(raw["inputs"]):
            yield from raw_document_paths(child, f"{here}.inputs.{position}")


def document_paths(node: Node, path: str = "plan") -> Iterator[tuple[Node, str]]:
    """Every operator of a plan, root first, with the path its JSON document gives it."""
    here = f"{path}.{node.op}"
    yield node, here
    for name in type(node).child_fields:
        value = getattr(node, name)
        if isinstance(value, tuple):
            for position, child in enumerate(value):
                yield from document_paths(child, f"{here}.{name}.{position}")
        else:
            yield from document_paths(value, f"{here}.{name}")
