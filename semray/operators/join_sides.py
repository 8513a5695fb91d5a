"""Whether a factorized semantic join asks both of its sides the same question of the same rows.

A self-join (``t.sem_join(t, "{l.text} and {r.text} have the same topic")``) reads one input plan
on both sides and the same cells of each: factorized, its side questions are one question over
one relation, so each row is asked once and the answers are joined with themselves (n calls, not
2n). Lowering (``pipeline/lowering/set_ops.py``), the LIMIT's round sizing and the cost model ask
this one predicate.
"""

from __future__ import annotations

from semray.operators.keys import operator_key
from semray.operators.semantic import SemJoin
from semray.operators.templates import split_side, template_columns


def side_cells(node: SemJoin, side: str) -> list[str]:
    """The columns ``node``'s instruction reads of ``side`` (``"l"`` or ``"r"``), in order, once each."""
    columns: list[str] = []
    for reference in template_columns(node.instruction, "SemJoin"):
        reference_side, column = split_side(reference, "SemJoin")
        if reference_side == side and column not in columns:
            columns.append(column)
    return columns


def is_self_join(node: SemJoin) -> bool:
    """A factorized join (without ``right_labels``) whose sides are one input plan (the same
    operator key) read through the same cells: its two side questions are the same question.

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
    if side_cells(node, "l") != side_cells(node, "r"):
        return False
    return operator_key(node.left) == operator_key(node.right)
