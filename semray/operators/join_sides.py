"""Whether a factorized semantic join asks both of its sides the same question of the same rows.

A self-join (``t.sem_join(t, "{l.text} and {r.text} have the same topic")``) reads one input plan
on both sides and the same cells of each: factorized, its side questions are one question over
one relation, so each row is asked once and the answers are joined with themselves (n calls, not
2n). Blocked, its two sides embed the same texts: they are embedded once (`reads_one_relation`).
Lowering (``pipeline/lowering/set_ops.py``), the LIMIT's round sizing and the cost model ask
these predicates.
"""

from __future__ import annotations

import math
import re

from semray.operators.base import Node, transform
from semray.operators.keys import operator_key
from semray.operators.relational import Scan
from semray.operators.semantic import SemJoin
from semray.operators.templates import split_side, template_columns

NESTED_MAX_PAIRS = 20_000
"""``implementation="auto"``: pairs (estimated) up to which every pair is judged."""


def join_implementation(node: SemJoin, left_rows: float | None, right_rows: float | None) -> str:
    """How ``node`` runs: its ``implementation``, or for ``auto`` ``nested`` up to `NESTED_MAX_PAIRS`
    pairs of ``left_rows x right_rows`` and ``blocked`` above (or when a count is unknown). Lowering
    asks it with the sources' stated counts, the cost model with its estimates.

    >>> from semray.operators import Scan, Schema, SourceSpec
    >>> t = Scan(source=SourceSpec(kind="memory", options={"name": "t"}), source_schema=Schema.of(("a", "VARCHAR")))
    >>> auto = SemJoin(left=t, right=t, instruction="{l.a} and {r.a} match")
    >>> join_implementation(auto, 100, 100), join_implementation(auto, 1000, 1000), join_implementation(auto, None, 5)
    ('nested', 'blocked', 'blocked')
    """
    if node.implementation != "auto":
        return node.implementation
    small = left_rows is not None and right_rows is not None and left_rows * right_rows <= NESTED_MAX_PAIRS
    return "nested" if small else "blocked"


def block_size(right_rows: int | None) -> int:
    """Candidates per left row of a blocked join: 4 sqrt(m), at least 8 (all when m is small);
    lowering blocks by it, the cost model prices the pairs it judges by it.

    >>> block_size(1000), block_size(16), block_size(2), block_size(None)
    (127, 16, 8, 64)
    """
    if right_rows is None:
        return 64
    return max(8, math.ceil(4 * math.sqrt(right_rows)))


def side_cells(node: SemJoin, side: str) -> list[str]:
    """The columns ``node``'s instruction reads of ``side`` (``"l"`` or ``"r"``), in order, once each."""
    columns: list[str] = []
    for reference in template_columns(node.instruction, "SemJoin"):
        reference_side, column = split_side(reference, "SemJoin")
        if reference_side == side and column not in columns:
            columns.append(column)
    return columns


def is_self_join(node: SemJoin) -> bool:
    """A factorized join (without ``right_labels``) whose sides are one input plan read through the
    same cells: its two side questions are the same question. One input plan: structurally equal
    (the same source and the same operators above it, `rows_key`), whether the two sides are one
    object or two reads of one table or file.

    >>> from semray.operators import Scan, Schema, SourceSpec
    >>> t = Scan(source=SourceSpec(kind="memory", options={"name": "t"}), source_schema=Schema.of(("a", "VARCHAR")))
    >>> u = Scan(source=SourceSpec(kind="memory", options={"name": "u"}), source_schema=Schema.of(("a", "VARCHAR")))
    >>> same = "{l.a} and {r.a} have the same topic"
    >>> is_self_join(SemJoin(left=t, right=t, instruction=same, implementation="factorized"))
    True
    >>> is_self_join(SemJoin(left=t, right=u, instruction=same, implementation="factorized"))
    False
    """
    if node.implementation != "factorized" or node.right_labels:
        return False
    return reads_one_relation(node)


def reads_one_relation(node: SemJoin) -> bool:
    """Whether ``node``'s sides are one input plan (`rows_key`) read through the same cells, so
    each side's texts are the other's: a factorized join asks them once (`is_self_join`), a blocked
    one embeds them once. Two different columns of one table are two different texts.

    >>> from semray.operators import Scan, Schema, SourceSpec
    >>> columns = Schema.of(("a", "VARCHAR"), ("b", "VARCHAR"))
    >>> t = Scan(source=SourceSpec(kind="memory", options={"name": "t"}), source_schema=columns)
    >>> reads_one_relation(SemJoin(left=t, right=t, instruction="{l.a} and {r.a} match", implementation="blocked"))
    True
    >>> reads_one_relation(SemJoin(left=t, right=t, instruction="{l.a} and {r.b} match", implementation="blocked"))
    False
    """
    if side_cells(node, "l") != side_cells(node, "r"):
        return False
    return rows_key(node.left) == rows_key(node.right)


_CONTENT_REF = re.compile(r"@([0-9a-f]{16})$")
"""A memory table's ref as ``semray.from_arrow`` makes it: ``name@`` its content digest."""


def rows_key(plan: Node) -> str:
    """The `operator_key` of ``plan`` with every in-memory table named by its content digest alone:
    two reads of one table (``semray.sql(q, {"a": t, "b": t})``, ``from_arrow(t, "x")`` and
    ``from_arrow(t)``) give the same key, two tables of different content never do. Files are
    already named by their resolved path (``readers._absolute``), so two reads of one file are
    one plan; a table registered by hand (a ref with no digest) keeps its ref."""

    def by_content(node: Node) -> Node:
        if not isinstance(node, Scan) or node.source.kind != "memory":
            return node
        found = _CONTENT_REF.search(str(node.source.options.get("ref", "")))
        if found is None:
            return node
        options = {**node.source.options, "ref": f"@{found.group(1)}"}
        options.pop("name", None)
        return node.model_copy(update={"source": node.source.model_copy(update={"options": options})})

    return operator_key(transform(plan, by_content))
