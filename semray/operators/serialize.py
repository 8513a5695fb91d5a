"""JSON plans: a versioned document ``{"version": 1, "plan": {...}}`` and its JSON Schema."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from semray.errors import PlanFormatError
from semray.operators.base import Node, locate
from semray.operators.plan import PlanNode

PLAN_VERSION = 1


class PlanDocument(BaseModel):
    """What ``semray run plan.json`` reads and ``Query.to_json()`` writes."""

    model_config = ConfigDict(frozen=True, extra="forbid", title="semray plan")

    version: Literal[1] = PLAN_VERSION
    plan: PlanNode


_DOCUMENT = TypeAdapter(PlanDocument)


def plan_to_json(node: Node, indent: int | None = 2) -> str:
    """Serialize a plan, e.g. ``plan_to_json(query.plan)``."""
    document = {"version": PLAN_VERSION, "plan": node.model_dump(mode="json")}
    return json.dumps(document, indent=indent)


def plan_from_json(text: str) -> Node:
    """Parse and validate a JSON plan; errors name the path to the bad field."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise PlanFormatError(f"plan is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    return plan_from_dict(raw)


def plan_from_dict(raw: Any) -> Node:
    if not isinstance(raw, dict) or "plan" not in raw:
        raise PlanFormatError('a plan file is an object {"version": 1, "plan": {...}}')
    version = raw.get("version")
    if version != PLAN_VERSION:
        raise PlanFormatError(
            f"plan version {version!r} is not supported; this semray reads version {PLAN_VERSION} "
            "(re-export the plan with this semray)"
        )
    try:
        document = _DOCUMENT.validate_python(raw)
    except ValidationError as error:
        path, message = locate(error)
        raise PlanFormatError(f"invalid plan at {'.'.join(path)}: {message}") from None
    return document.plan


def plan_json_schema() -> dict[str, Any]:
    """The published JSON Schema of plan documents (``semray schema``)."""
    schema = _DOCUMENT.json_schema()
    schema["$id"] = f"https://semray.dev/schema/plan-v{PLAN_VERSION}.json"
    return schema
