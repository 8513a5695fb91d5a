"""Rule 7: a semantic join whose predicate compares one property of each side is factorized.

Precondition: a ``SemJoin`` with ``implementation="auto"`` whose instruction reads exactly
one left and one right column and says, in one of the *exact* forms of
``planner/join_factors.detect_factorization``, that the two values share a named property
("the same X") or do not ("different X", "differ in X", "do not have the same X"). Such a
predicate is ``f(l) = f(r)`` (or ``f(l) <> f(r)``) for a per-row function ``f`` (the
property), so the join can classify each side once (``n + m`` model calls) and join the
answers relationally, instead of asking about every pair (``n * m``). The rule only marks the
join ``implementation="factorized"`` (with ``relation="<>"`` and the property named for the
"different" forms); the lowering does the rest.

Forms whose per-row answers may disagree with the pairwise ones (ordered comparisons, whose
scale has ties; "opposite X", which a neutral value breaks) and free-form wordings are not
rewritten here: they are factorized only after verification on a sample
(``pipeline/runs/plan_time/join_factorization.py``). Anything with a second column per side, a doubt ("similar",
"related") or extra clauses is left alone: a false positive would change results, a false
negative only costs.

Why results are preserved: for a predicate of the form "same X", a pair satisfies it exactly
when both sides get the same X (for "different X", exactly when they do not); results change
only if the model's pairwise judgement and its per-side labels disagree (measured per tier by
the cost model's quality estimates).

Before: ``SemJoin[auto] '{l.review} and {r.review} have the same sentiment'``
After:  ``SemJoin[factorized] '{l.review} and {r.review} have the same sentiment'``
"""

from __future__ import annotations

from semray.operators.base import Node, transform
from semray.operators.semantic import SemJoin
from semray.planner.capabilities import rebuild
from semray.planner.join_factors import detect_factorization
from semray.planner.rules.context import EMPTY_CONTEXT, RuleContext


def factorize_semantic_joins(plan: Node, context: RuleContext = EMPTY_CONTEXT) -> Node:
    """Mark "same X" and "different X" semantic joins as factorized."""
    return transform(plan, _factorize)


def _factorize(node: Node) -> Node:
    if not isinstance(node, SemJoin) or node.implementation != "auto":
        return node
    found = detect_factorization(node.instruction)
    if found is None or not found.exact:
        return node
    if found.relation == "=":
        return rebuild(node, implementation="factorized")
    return rebuild(node, implementation="factorized", factor=found.factor, relation=found.relation)


def shared_property(instruction: str) -> str | None:
    """The property X when ``instruction`` says one left and one right value share "the same X".

    >>> shared_property("{l.review} and {r.review} have the same sentiment")
    'sentiment'
    >>> shared_property("Is {l.title} about the same topic as {r.abstract}?")
    'topic'
    >>> shared_property("{l.review} is more positive than {r.review}") is None
    True
    """
    found = detect_factorization(instruction)
    return found.factor if found is not None and found.exact and found.relation == "=" else None
