"""Rule 5: order consecutive semantic filters by (1 - selectivity) / cost, highest first.

Precondition: a chain of two or more ``SemFilter`` nodes (no diagnostics columns), and a
measured selectivity for every one of them in the context (without statistics the rule
returns its input). The filter that drops the most rows per unit of cost runs first (at
the bottom of the chain); a filter's cost per row comes from the context and defaults to 1
(all filters cost alike) when unknown. Ties keep the written order.

Why results are preserved: a conjunction of per-row predicates is commutative; the chain
keeps a row exactly when every filter holds for it, in whatever order they are asked.

This is the classic rank ordering for independent predicates (expected cost of the chain
is minimal when filters are sorted by (1 - s) / c); with correlated predicates it is a
heuristic, since the selectivities used are each filter's own, not conditional ones.

Before (selectivities: delivery 0.9, refund 0.1; equal cost)::

    SemFilter '{review} mentions a refund'
    └─ SemFilter '{review} mentions delivery'
       └─ Scan reviews

After::

    SemFilter '{review} mentions delivery'
    └─ SemFilter '{review} mentions a refund'
       └─ Scan reviews
"""

from __future__ import annotations

from semray.operators.base import Node, transform
from semray.operators.semantic import SemFilter
from semray.planner.rules.context import EMPTY_CONTEXT, RuleContext


def order_semantic_filters(plan: Node, context: RuleContext = EMPTY_CONTEXT) -> Node:
    """Reorder chains of semantic filters by (1 - selectivity) / cost."""

    def reorder(node: Node) -> Node:
        chain = _chain(node)
        if len(chain) < 2:
            return node
        ranks: list[float] = []
        for member in chain:
            selectivity = context.selectivity(member)
            if selectivity is None:
                return node
            cost = context.row_cost(member) or 1.0
            ranks.append((1.0 - selectivity) / max(cost, 1e-12))
        # Executed bottom-up: the best rank goes first; ties keep the written order, in which
        # the lowest filter (last in ``chain``) runs first.
        base = chain[-1].input
        rebuilt: Node = base
        for position in sorted(range(len(chain)), key=lambda p: (-ranks[p], -p)):
            rebuilt = chain[position].with_children((rebuilt,))
        return rebuilt

    return transform(plan, reorder)


def _chain(node: Node) -> list[SemFilter]:
    """Consecutive semantic filters from ``node`` down, top first."""
    chain: list[SemFilter] = []
    current = node
    while isinstance(current, SemFilter) and not current.diagnostics:
        chain.append(current)
        current = current.input
    return chain
