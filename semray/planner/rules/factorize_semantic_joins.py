"""Rule 7: a semantic join whose predicate compares one property of each side is factorized.

Precondition: a ``SemJoin`` with ``implementation="auto"`` whose instruction reads exactly
one left and one right column and says, in one of the phrasings below, that the two values
share a named property ("the same X"). Such a predicate is ``f(l) = f(r)`` for a per-row
function ``f`` (the property), so the join can classify each side once (``n + m`` model
calls) and join the labels relationally, instead of asking about every pair (``n * m``).
The rule only marks the join ``implementation="factorized"``; the lowering does the rest.

The detector is deliberately conservative: it accepts only these shapes (case-insensitive,
optional trailing ``?`` or ``.``, optional leading "Do"/"Does"/"Are"/"Is", which then
stands for the verb: "Is {l.a} about the same X as {r.b}?"):

* ``{l.a} and {r.b} have|share the same X``
* ``{l.a} and {r.b} are about|in|of|from the same X``
* ``{l.a} has|shares the same X as {r.b}``
* ``{l.a} is about|in|of|from the same X as {r.b}``

(and the same with ``r`` before ``l``), where X is one to four words. Anything with a
negation, a second column per side, a comparison ("more", "similar", "related"), or extra
clauses is left alone: a false positive would change results, a false negative only costs.

Why results are preserved: for a predicate of the form "same X", a pair satisfies it exactly
when both sides get the same X; results change only if the model's pairwise judgement and
its per-side labels disagree (measured per tier by the cost model's quality estimates).

Before: ``SemJoin[auto] '{l.review} and {r.review} have the same sentiment'``
After:  ``SemJoin[factorized] '{l.review} and {r.review} have the same sentiment'``
"""

from __future__ import annotations

import re

from semray.operators.base import Node, transform
from semray.operators.semantic import SemJoin
from semray.operators.templates import split_side, template_columns
from semray.planner.capabilities import rebuild
from semray.planner.rules.context import EMPTY_CONTEXT, RuleContext

_REF = r"\{([lr])\.([^{}]+)\}"
_PROPERTY = r"(?P<property>[a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,3})"
_LEAD = r"^\s*(?:(?:do|does|are|is)\s+)?"
_END = r"\s*[?.]?\s*$"
_PATTERNS = tuple(
    re.compile(_LEAD + body + _END, re.IGNORECASE)
    for body in (
        _REF + r"\s+and\s+" + _REF + r"\s+(?:have|share)\s+the\s+same\s+" + _PROPERTY,
        _REF + r"\s+and\s+" + _REF + r"\s+(?:(?:are|is)\s+)?(?:about|in|of|from)\s+the\s+same\s+" + _PROPERTY,
        _REF + r"\s+(?:has|have|shares|share)\s+the\s+same\s+" + _PROPERTY + r"\s+as\s+" + _REF,
        _REF + r"\s+(?:(?:is|are)\s+)?(?:about|in|of|from)\s+the\s+same\s+" + _PROPERTY + r"\s+as\s+" + _REF,
    )
)
_NOT_A_PROPERTY = frozenset({"not", "no", "more", "less", "similar", "related", "different", "than", "or", "and"})


def factorize_semantic_joins(plan: Node, context: RuleContext = EMPTY_CONTEXT) -> Node:
    """Mark "same X" semantic joins as factorized."""
    return transform(plan, _factorize)


def _factorize(node: Node) -> Node:
    if not isinstance(node, SemJoin) or node.implementation != "auto":
        return node
    if shared_property(node.instruction) is None:
        return node
    return rebuild(node, implementation="factorized")


def shared_property(instruction: str) -> str | None:
    """The property X when ``instruction`` says one left and one right value share "the same X".

    >>> shared_property("{l.review} and {r.review} have the same sentiment")
    'sentiment'
    >>> shared_property("Is {l.title} about the same topic as {r.abstract}?")
    'topic'
    >>> shared_property("{l.review} is more positive than {r.review}") is None
    True
    """
    references = template_columns(instruction, "SemJoin")
    if sorted(split_side(reference, "SemJoin")[0] for reference in references) != ["l", "r"]:
        return None
    for pattern in _PATTERNS:
        match = pattern.match(instruction)
        if match is None:
            continue
        # The template reads exactly one left and one right column (checked above), and the
        # pattern places both references, so they are those two.
        words = set(match.group("property").lower().split())
        if not words & _NOT_A_PROPERTY:
            return match.group("property").lower()
    return None
