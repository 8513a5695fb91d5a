"""Rule 3: split a multi-field extraction so fields run right before their first use.

Precondition: a ``SemExtract`` (no diagnostics, ``on_error`` not ``skip``) directly below a
row-dropping parent (``Filter``, ``SemFilter``, semi/anti join; see rule 2) that reads some
of its fields but not its last ones. The extraction splits in two: the fields up to the last
one the parent reads stay below it, the trailing fields move above it and so run on the
surviving rows only. Repeated, each field ends just below its first reader (rule 2 keeps
moving the upper part). Fields keep their declared order, so the output columns keep theirs:
a field that the parent does not read but that comes before one it does stays below.

Why results are preserved: each field of a row is extracted from that row alone (the
per-field answer does not depend on which other fields are asked for in the same prompt; see
docs/optimizer.md for this assumption), the parent reads only the fields that stay below, and
with ``on_error`` ``fail`` or ``default`` a field that cannot be extracted fails the run or
is null either way.

Before::

    Filter amount > 100
    └─ SemExtract '{email}' -> amount, sender, subject
       └─ Scan emails

After::

    SemExtract '{email}' -> sender, subject
    └─ Filter amount > 100
       └─ SemExtract '{email}' -> amount
          └─ Scan emails
"""

from __future__ import annotations

from semray.operators.base import Node, transform
from semray.operators.semantic import SemExtract
from semray.planner.capabilities import drops_rows_only, rebuild
from semray.planner.rules.context import EMPTY_CONTEXT, RuleContext


def split_extract_fields(plan: Node, context: RuleContext = EMPTY_CONTEXT) -> Node:
    """Split extractions whose trailing fields the parent above them does not read."""
    return transform(plan, _split)


def _split(node: Node) -> Node:
    if not drops_rows_only(node):
        return node
    child = node.children[0]
    if not isinstance(child, SemExtract) or child.diagnostics or child.on_error == "skip" or len(child.fields) < 2:
        return node
    read = node.columns_read()
    used = [position for position, field in enumerate(child.fields) if field.name in read]
    if not used or used[-1] == len(child.fields) - 1:
        return node  # rule 2 moves an extraction nobody here reads; one whose last field is read stays
    cut = used[-1] + 1
    lower = rebuild(child, fields=child.fields[:cut])
    below = node.with_children((lower, *node.children[1:]))
    return rebuild(child, input=below, fields=child.fields[cut:])
