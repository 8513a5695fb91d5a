"""Faults injected into valid plan documents: the validator benchmark's and the stand-in planner's.

Each kind mimics a mistake a model makes when writing plans: a wrong column, a missing operator,
a wrong type, a wrong join key, a wrong aggregate, a wrong ``{column}`` template reference.
A fault says whether the grammar validator can see it (``grammar``) or only a judge of the
plan's meaning can (``semantic``: e.g. ``avg`` swapped for ``sum``), and names a ``marker`` —
the text feedback must mention for a stand-in to know its fault was found.

>>> fault = inject(document, "wrong_column", random.Random(0))  # doctest: +SKIP
>>> fault.marker  # doctest: +SKIP
'ratin'
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from semray.operators import Join, Node, Scan
from semray.operators.plan_paths import document_paths, raw_document_paths
from semray.operators.serialize import plan_from_dict
from semray.planner.agents.grammar import type_family

FaultKind = Literal[
    "wrong_column", "missing_operator", "wrong_type", "wrong_join_key", "wrong_aggregate", "wrong_template"
]
FAULT_KINDS: tuple[FaultKind, ...] = (
    "wrong_column",
    "missing_operator",
    "wrong_type",
    "wrong_join_key",
    "wrong_aggregate",
    "wrong_template",
)
_TEXT_FIELDS = ("predicate", "instruction", "on")
_SWAPS = {"avg": "sum", "sum": "avg", "min": "max", "max": "min"}
_TYPE_SWAPS = {"BIGINT": "VARCHAR", "VARCHAR": "BIGINT", "DOUBLE": "VARCHAR", "BOOLEAN": "BIGINT", "DATE": "BIGINT"}


@dataclass(frozen=True, slots=True)
class Fault:
    """A faulted copy of a plan document, what was done, and who can detect it."""

    kind: FaultKind
    document: dict[str, Any]
    description: str
    marker: str
    detectable: Literal["grammar", "semantic"] = "grammar"


def inject(document: dict[str, Any], kind: FaultKind, rng: random.Random) -> Fault | None:
    """One fault of ``kind`` at a random place of ``document`` (None when the plan has no such place)."""
    faulted = copy.deepcopy(document)
    plan = plan_from_dict(document)
    nodes = list(document_paths(plan))
    raws = {path: raw for raw, path in raw_document_paths(faulted["plan"])}
    made = _INJECTORS[kind]([(node, raws[path], path) for node, path in nodes], faulted, rng)
    if made is None:
        return None
    description, marker, detectable = made
    return Fault(kind, faulted, description, marker, detectable)


Site = tuple[Node, dict[str, Any], str]
Made = tuple[str, str, Literal["grammar", "semantic"]] | None


def _strings(raw: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """(container, key) of every expression-bearing string of a node."""
    places: list[tuple[dict[str, Any], str]] = [(raw, name) for name in _TEXT_FIELDS if isinstance(raw.get(name), str)]
    for name in ("exprs", "aggs"):
        places += [(item, "expr") for item in raw.get(name, []) if isinstance(item, dict)]
    places += [(item, "column") for item in raw.get("keys", []) if isinstance(item, dict)]
    return places


def _reference(name: str, key: str) -> str:
    """A pattern for a column reference: ``{name}`` in an instruction, the bare word elsewhere."""
    return r"\{" + re.escape(name) + r"\}" if key == "instruction" else rf"\b{re.escape(name)}\b"


def _misspell(name: str, rng: random.Random) -> str:
    if len(name) > 3:
        position = rng.randrange(1, len(name))
        return name[:position] + name[position + 1 :]
    return name + "_x"


def _wrong_column(sites: list[Site], document: dict[str, Any], rng: random.Random) -> Made:
    choices = []
    for node, raw, path in sites:
        if isinstance(node, Scan):
            continue
        names = {c.name for child in node.children for c in child.output_schema.user_columns()}
        for container, key in _strings(raw):
            for name in sorted(names):
                if re.search(_reference(name, key), container[key]):
                    choices.append((container, key, name, path))
    if not choices:
        return None
    container, key, name, path = rng.choice(choices)
    wrong = _misspell(name, rng)
    replacement = "{" + wrong + "}" if key == "instruction" else wrong
    container[key] = re.sub(_reference(name, key), replacement, container[key], count=1)
    return f"{path}.{key}: column {name!r} -> {wrong!r}", wrong, "grammar"


def _missing_operator(sites: list[Site], document: dict[str, Any], rng: random.Random) -> Made:
    """Drop a unary operator that adds columns used above it (so a reference dangles)."""
    candidates = []
    for node, raw, path in sites:
        if "input" not in raw or isinstance(node, Scan):
            continue
        added = set(node.output_schema.names) - set(raw_input_names(node))
        if added:
            candidates.append((raw, path, sorted(added)[0]))
    parents = {id(raw.get(name)): (raw, name) for _, raw, _ in sites for name in ("input", "left", "right")}
    candidates = [item for item in candidates if id(item[0]) in parents and _used_above(item[0], item[2], sites)]
    if candidates:
        raw, path, column = rng.choice(candidates)
        parent, slot = parents[id(raw)]
        parent[slot] = raw["input"]
        return f"{path}: dropped {raw['op']} (it made {column!r})", column, "grammar"
    filters = [(raw, path) for _, raw, path in sites if raw["op"] in ("filter", "sem_filter") and id(raw) in parents]
    if not filters:
        return None
    raw, path = rng.choice(filters)
    parent, slot = parents[id(raw)]
    parent[slot] = raw["input"]
    return f"{path}: dropped {raw['op']}", str(raw.get("predicate") or raw.get("instruction")), "semantic"


def raw_input_names(node: Node) -> tuple[str, ...]:
    return tuple(name for child in node.children for name in child.output_schema.names)


def _used_above(raw: dict[str, Any], column: str, sites: list[Site]) -> bool:
    text = repr([site_raw for _, site_raw, _ in sites if site_raw is not raw and _contains(site_raw, raw)])
    return re.search(rf"\b{re.escape(column)}\b", text.replace(repr(raw), "")) is not None


def _contains(outer: dict[str, Any], inner: dict[str, Any]) -> bool:
    stack: list[Any] = [outer.get(name) for name in ("input", "left", "right")] + list(outer.get("inputs", []) or [])
    while stack:
        item = stack.pop()
        if item is inner:
            return True
        if isinstance(item, dict):
            stack += [item.get(name) for name in ("input", "left", "right")] + list(item.get("inputs", []) or [])
    return False


def _wrong_type(sites: list[Site], document: dict[str, Any], rng: random.Random) -> Made:
    columns = [
        (column, path)
        for node, raw, path in sites
        if isinstance(node, Scan)
        for column in raw["source_schema"]["columns"]
        if column["type"] in _TYPE_SWAPS
    ]
    if not columns:
        return None
    column, path = rng.choice(columns)
    before = column["type"]
    column["type"] = _TYPE_SWAPS[before]
    return f"{path}: column {column['name']!r} typed {column['type']} (is {before})", column["name"], "grammar"


def _wrong_join_key(sites: list[Site], document: dict[str, Any], rng: random.Random) -> Made:
    joins = [(node, raw, path) for node, raw, path in sites if isinstance(node, Join)]
    if not joins:
        return None
    node, raw, path = rng.choice(joins)
    (left_key, right_key), *_ = node.keys[0]
    family = type_family(node.right.output_schema.type_of(right_key))
    others = [
        c.name for c in node.left.output_schema.user_columns() if c.name != left_key and type_family(c.type) != family
    ]
    wrong = rng.choice(others) if others else _misspell(left_key, rng)
    raw["on"] = re.sub(rf"\bl\.{re.escape(left_key)}\b", f"l.{wrong}", raw["on"], count=1)
    return f"{path}.on: key l.{left_key} -> l.{wrong}", wrong, "grammar"


def _wrong_aggregate(sites: list[Site], document: dict[str, Any], rng: random.Random) -> Made:
    aggs = [(item, path) for _, raw, path in sites if raw["op"] == "aggregate" for item in raw.get("aggs", [])]
    if not aggs:
        return None
    item, path = rng.choice(aggs)
    match = re.match(r"\s*(\w+)\s*\(", item["expr"])
    if match is None:
        return None
    function = match.group(1).lower()
    if rng.random() < 0.5 or function not in _SWAPS:
        wrong = {"avg": "average", "sum": "total", "count": "cnt", "min": "minimum", "max": "maximum"}.get(
            function, function + "_of"
        )
        item["expr"] = item["expr"].replace(match.group(1), wrong, 1)
        return f"{path}: aggregate {function}( -> {wrong}(", wrong, "grammar"
    wrong = _SWAPS[function]
    item["expr"] = item["expr"].replace(match.group(1), wrong, 1)
    return f"{path}: aggregate {function} -> {wrong}", f"{wrong}(", "semantic"


def _wrong_template(sites: list[Site], document: dict[str, Any], rng: random.Random) -> Made:
    semantic = [
        (raw, path)
        for _, raw, path in sites
        if isinstance(raw.get("instruction"), str) and re.search(r"\{[^{}]+\}", raw["instruction"])
    ]
    if not semantic:
        return None
    raw, path = rng.choice(semantic)
    reference = re.search(r"\{([^{}]+)\}", raw["instruction"])
    assert reference is not None
    name = reference.group(1)
    if rng.random() < 0.5:
        wrong = _misspell(name.split(".")[-1], rng)
        wrong = f"{name.split('.')[0]}.{wrong}" if "." in name else wrong
        raw["instruction"] = raw["instruction"].replace("{" + name + "}", "{" + wrong + "}", 1)
        return f"{path}.instruction: {{{name}}} -> {{{wrong}}}", wrong, "grammar"
    raw["instruction"] = re.sub(r"\{([^{}]+)\}", r"\1", raw["instruction"])
    return f"{path}.instruction: braces dropped, no column referenced", "references no column", "grammar"


_INJECTORS: dict[FaultKind, Callable[[list[Site], dict[str, Any], random.Random], Made]] = {
    "wrong_column": _wrong_column,
    "missing_operator": _missing_operator,
    "wrong_type": _wrong_type,
    "wrong_join_key": _wrong_join_key,
    "wrong_aggregate": _wrong_aggregate,
    "wrong_template": _wrong_template,
}
