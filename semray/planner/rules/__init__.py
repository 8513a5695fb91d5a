"""The rewrite rules, in the order the optimizer applies them, and their fixpoint.

Each rule is a pure ``(plan, context) -> plan`` function in its own module, with a
docstring stating its precondition, why it preserves results, and a before/after example.
A rule that does not apply returns its input (the same object, or an equal one).

Order: shared expressions go first so later rules see each computation once; relational
filters drop rows before anything else moves; semantic operators and extraction fields then
move up past the filters that do not need them; limits sink to the filters they wait for;
semantic filter chains are ordered by rank; semantic joins pick their implementation; and
columns are pruned last, once every operator has found its place.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from semray.operators.base import Node
from semray.planner.rules.context import EMPTY_CONTEXT, RuleContext
from semray.planner.rules.defer_unneeded_semantic import defer_unneeded_semantic
from semray.planner.rules.factorize_semantic_joins import factorize_semantic_joins
from semray.planner.rules.order_semantic_filters import order_semantic_filters
from semray.planner.rules.prefer_validated_code import prefer_validated_code  # a choice, not in RULES
from semray.planner.rules.prune_columns import prune_columns
from semray.planner.rules.push_filters_below_semantic import push_filters_below_semantic
from semray.planner.rules.push_limit_down import push_limit_down
from semray.planner.rules.share_semantic_expressions import share_semantic_expressions
from semray.planner.rules.split_extract_fields import split_extract_fields

Rule = Callable[[Node, RuleContext], Node]

RULES: tuple[Rule, ...] = (
    share_semantic_expressions,
    push_filters_below_semantic,
    defer_unneeded_semantic,
    split_extract_fields,
    push_limit_down,
    order_semantic_filters,
    factorize_semantic_joins,
    prune_columns,
)

MAX_ROUNDS = 16
"""Every rule moves operators one way (filters down, semantic work up, limits down), so a
fixpoint comes within a few rounds; the bound only guards against a future rule that cycles."""

log = structlog.get_logger(__name__)


def apply_rules(plan: Node, context: RuleContext = EMPTY_CONTEXT, rules: tuple[Rule, ...] = RULES) -> Node:
    """Apply ``rules`` in order, round after round, until a round changes nothing.

    >>> apply_rules(plan) == apply_rules(apply_rules(plan))  # doctest: +SKIP
    True
    """
    current = plan
    for round_number in range(1, MAX_ROUNDS + 1):
        before = current
        for rule in rules:
            rewritten = rule(current, context)
            if rewritten != current:
                log.debug("planner.rule_applied", rule=rule.__name__, round=round_number)
            current = rewritten
        if current == before:
            return current
    log.warning("planner.rules_no_fixpoint", rounds=MAX_ROUNDS)
    return current


__all__ = [
    "EMPTY_CONTEXT",
    "MAX_ROUNDS",
    "RULES",
    "Rule",
    "RuleContext",
    "apply_rules",
    "defer_unneeded_semantic",
    "factorize_semantic_joins",
    "order_semantic_filters",
    "prefer_validated_code",
    "prune_columns",
    "push_filters_below_semantic",
    "push_limit_down",
    "share_semantic_expressions",
    "split_extract_fields",
]
