"""The base of every logical operator: a frozen, structurally compared plan node."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from semray.errors import PlanError
from semray.operators.schema import Schema


class NodeArgumentError(PlanError, ValueError):
    """A node's arguments are malformed. A ValueError too, so that pydantic reports
    where in a nested JSON plan it happened; ``path`` leads to the bad field."""

    def __init__(self, node: str, path: tuple[str, ...], detail: str) -> None:
        super().__init__(f"{node}: invalid {'.'.join(path) or 'arguments'}: {detail}")
        self.path = path
        self.detail = detail


def locate(error: ValidationError) -> tuple[tuple[str, ...], str]:
    """The full path and message of a validation error's first problem, through nested nodes."""
    first = error.errors()[0]
    path = tuple(str(part) for part in first["loc"])
    inner = first.get("ctx", {}).get("error")
    if isinstance(inner, NodeArgumentError):
        return path + inner.path, inner.detail
    return path, first["msg"]


class Node(BaseModel):
    """A logical operator. Children are fields; derived facts are cached properties.

    Subclasses declare capabilities as class variables (and ``columns_read``, ``drops_rows_only``
    as methods) so that rules ask ``node.calls_llm`` instead of testing concrete classes; the
    semantic operators declare theirs on ``semray.operators.semantic.SemanticNode``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    op: str
    child_fields: ClassVar[tuple[str, ...]] = ()
    calls_llm: ClassVar[bool] = False
    """Sends prompts to a language model tier (small or large)."""
    calls_model: ClassVar[bool] = False
    """Calls any model tier: a language model, or the embedding tier (SemSearch)."""
    row_preserving: ClassVar[bool] = False
    """Each input row yields exactly one output row with the same row id."""
    deterministic: ClassVar[bool] = True
    """The same input gives the same output (a model's answers are cached and journaled per
    prompt, so a semantic operator asked the same question of the same row answers the same)."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise NodeArgumentError(type(self).__name__, *locate(error)) from None

    def model_post_init(self, context: Any, /) -> None:
        # Invariants are checked at construction: deriving the schema validates columns.
        _ = self.output_schema

    @property
    def children(self) -> tuple[Node, ...]:
        nodes: list[Node] = []
        for name in self.child_fields:
            value = getattr(self, name)
            nodes.extend(value if isinstance(value, tuple) else (value,))
        return tuple(nodes)

    def with_children(self, children: tuple[Node, ...]) -> Self:
        """A copy of this node over new children, in ``children`` order."""
        if children == self.children:
            return self
        update: dict[str, Any] = {}
        remaining = list(children)
        for name in self.child_fields:
            value = getattr(self, name)
            if isinstance(value, tuple):
                update[name] = tuple(remaining[: len(value)])
                del remaining[: len(value)]
            else:
                update[name] = remaining.pop(0)
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        return type(self).model_validate({**fields, **update})

    def __eq__(self, other: object) -> bool:
        # Fields only: pydantic's own __eq__ compares __dict__ first, which holds the cached
        # output_schema on one side and not the other, then retries field by field; on a deep
        # plan that doubles the work per level (an optimizer fixpoint over 25 Projects took minutes).
        if self is other:
            return True
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in type(self).model_fields)

    # Python drops __hash__ where __eq__ is defined; pydantic gives every frozen subclass its
    # field hash again.
    __hash__ = None  # type: ignore[assignment]

    @functools.cached_property
    def output_schema(self) -> Schema:
        return self.derive_schema()

    def derive_schema(self) -> Schema:
        raise NotImplementedError

    @functools.cached_property
    def depth(self) -> int:
        """How many operators nest from this one down to its deepest leaf (a scan alone is 1).

        Cached per node, so a plan built step by step computes it once per step."""
        return 1 + max((child.depth for child in self.children), default=0)

    def columns_read(self) -> frozenset[str]:
        """Input columns this operator reads (not the ones it passes through)."""
        return frozenset()

    def drops_rows_only(self) -> bool:
        """Whether the output is a subset of the first input's rows, unchanged and in the same
        columns (a ``Filter``, a ``SemFilter`` without diagnostics, a semi or anti join)."""
        return False

    def label(self) -> str:
        """One line describing this node for EXPLAIN, e.g. ``Filter rating >= 4``."""
        return self.op

    def quality_shortfall(self) -> str | None:
        """Why a quality target this node asks for cannot be met as asked (None: no target, or it can)."""
        return None


def transform(node: Node, rewrite: Callable[[Node], Node]) -> Node:
    """Rewrite a plan bottom-up: children first, then ``rewrite`` on the rebuilt node.

    >>> transform(plan, lambda n: n)  == plan  # doctest: +SKIP
    True
    """
    children = tuple(transform(child, rewrite) for child in node.children)
    return rewrite(node.with_children(children))


def quality_warnings(plan: Node) -> tuple[str, ...]:
    """Every operator's ``quality_shortfall``, parents first: shown by EXPLAIN and the CLI."""
    return tuple(warning for node in walk(plan) if (warning := node.quality_shortfall()) is not None)


def walk(node: Node) -> list[Node]:
    """Every node of a plan, parents before children."""
    nodes = [node]
    for child in node.children:
        nodes.extend(walk(child))
    return nodes
