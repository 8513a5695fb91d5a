"""Operator definitions for prompts, generated from the IR (node classes and the plan JSON Schema).

Nothing here is hand-copied: each operator's name, purpose and fields come from its class
docstring and from ``plan_json_schema()``, so a new operator or field reaches the prompts by
itself. ``narrowed_plan_schema`` keeps only the operators a plan may use, for the manipulation
agent's output constraint.

>>> "sem_filter" in operator_names()
True
>>> operator_definitions(("filter",)).splitlines()[0]
'filter: Keep rows where a SQL predicate is true: ``Filter(input=s, predicate="rating >= 4")``.'
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Iterable
from typing import Any

from semray.operators import plan_json_schema
from semray.operators.base import Node
from semray.operators.plan import OPERATORS


def operator_names() -> tuple[str, ...]:
    return tuple(_op(cls) for cls in OPERATORS)


def operator_class(op: str) -> type[Node] | None:
    return next((cls for cls in OPERATORS if _op(cls) == op), None)


def operator_definitions(ops: Iterable[str] | None = None) -> str:
    """One block per operator: ``op: purpose`` then its fields with types and defaults."""
    wanted = set(operator_names() if ops is None else ops)
    chosen = [cls for cls in OPERATORS if _op(cls) in wanted]
    operators = {cls.__name__ for cls in OPERATORS}
    types = sorted(_referenced([cls.__name__ for cls in chosen]) - operators)
    blocks = [_definition(cls) for cls in chosen]
    blocks += [_value_type(name) for name in types]
    return "\n".join(blocks)


def narrowed_plan_schema(ops: Iterable[str]) -> dict[str, Any]:
    """The plan document schema with only ``ops`` (and ``scan``) allowed as operators."""
    allowed = set(ops) | {"scan"}
    schema = copy.deepcopy(_schema())
    drop = {cls.__name__ for cls in OPERATORS if _op(cls) not in allowed}
    refs = {f"#/$defs/{name}" for name in drop}

    def prune(value: Any) -> None:
        if isinstance(value, dict):
            mapping = value.get("discriminator", {}).get("mapping")
            if isinstance(mapping, dict):
                value["discriminator"]["mapping"] = {k: v for k, v in mapping.items() if v not in refs}
                value["oneOf"] = [item for item in value.get("oneOf", []) if item.get("$ref") not in refs]
            for item in value.values():
                prune(item)
        elif isinstance(value, list):
            for item in value:
                prune(item)

    for name in drop:
        schema["$defs"].pop(name, None)
    prune(schema)
    return schema


@functools.cache
def _schema() -> dict[str, Any]:
    return plan_json_schema()


def _op(cls: type[Node]) -> str:
    return str(cls.model_fields["op"].default)


def _definition(cls: type[Node]) -> str:
    doc = inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].replace("\n", " ")
    lines = [f"{_op(cls)}: {doc}"]
    properties = _schema()["$defs"][cls.__name__].get("properties", {})
    required = set(_schema()["$defs"][cls.__name__].get("required", []))
    for name, prop in properties.items():
        if name == "op":
            continue
        kind = "operator" if name in cls.child_fields else _type_text(prop)
        if name in cls.child_fields and "items" in prop:
            kind = "list of operators"
        note = "required" if name in required else f"default {_default(prop)}"
        described = cls.model_fields[name].description if name in cls.model_fields else None
        extra = f" — {described}" if described else ""
        lines.append(f"  - {name}: {kind} ({note}){extra}")
    return "\n".join(lines)


def _referenced(names: list[str]) -> set[str]:
    """Non-operator ``$defs`` the named definitions use, transitively."""
    seen: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        for ref in _refs(_schema()["$defs"].get(name, {})):
            if ref not in seen and ref not in {cls.__name__ for cls in OPERATORS}:
                seen.add(ref)
                stack.append(ref)
    return seen


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        if "discriminator" in value:
            return set()  # a child operator, described on its own
        found = {str(value["$ref"]).rsplit("/", 1)[-1]} if "$ref" in value else set()
        for item in value.values():
            found |= _refs(item)
        return found
    if isinstance(value, list):
        return set().union(*(_refs(item) for item in value)) if value else set()
    return set()


def _value_type(name: str) -> str:
    definition = _schema()["$defs"][name]
    doc = str(definition.get("description", "")).split("\n\n")[0].replace("\n", " ")
    fields = ", ".join(
        f"{field}: {_type_text(prop)}" + ("" if field in definition.get("required", []) else f" = {_default(prop)}")
        for field, prop in definition.get("properties", {}).items()
    )
    return f"type {name} {{{fields}}}" + (f" — {doc}" if doc else "")


def _default(prop: dict[str, Any]) -> str:
    return repr(prop.get("default")) if "default" in prop else "none"


def _type_text(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    if "enum" in prop:
        return " | ".join(repr(item) for item in prop["enum"])
    if "const" in prop:
        return repr(prop["const"])
    if "anyOf" in prop:
        return " | ".join(_type_text(item) for item in prop["anyOf"])
    kind = prop.get("type")
    if kind == "array":
        return f"list of {_type_text(prop.get('items', {}))}"
    if kind == "object":
        return "object"
    return str(kind or "any")
