"""A LIMIT's early stop, priced: the semantic chain under a LIMIT asks only what the LIMIT needs.

Execution runs the chain directly under a ``LIMIT k`` (row-wise semantic operators, relational
filters and projections between them, through a factorized join's left side, perhaps ending in a
pair join) in round trips that grow (``cost_model/limit_chain.first_round_rows``,
``pipeline/workers/limit_rounds.limited_rows``): the first round covers about ``k / s0`` rows,
``s0`` the chain's selectivity from the cardinality defaults, and rounds stop once ``k`` rows
passed. So the chain draws about ``k / s`` rows (``s`` its selectivity as estimated here, measured
when the statistics have it) plus at most one round of overshoot, which the first round bounds
while the rounds double. `limit_stops` prices that: each operator of the chain is scaled to

    drawn = min(N, ceil(k / s) + first_round),   first_round = ceil(k / s0)

of its ``N`` input rows (pairs for a pair join), the chain's rows passed on scaled alike. A
factorized join in the chain asks its right side whole (m calls) and only the left rows the rounds
draw; a factorized self-join (``operators/join_sides.is_self_join``) draws about ``sqrt(w / s)``
rows for ``w`` pairs, since r rows give about ``s r^2`` pairs. The LIMIT's own estimate carries a
line saying what was drawn (``OperatorEstimate.early_stop``), which EXPLAIN shows.

What is not scaled: operators below a pair join (its sides are read whole), below anything else
that is no such chain (a sort, an aggregate, a top-k: they read every row first). A top-k right
under a LIMIT of fewer rows is priced as the top ``count + offset`` it runs as (`_top_only`). A
top-k right under the chain (the chain's bottom reads its ranks) is ranked as the rounds draw them
(``pipeline/ray/set_ops.ranks_in_rounds``): it still embeds every row and keeps the prefilter of its
``k``, but sorts only the ranks drawn, so it is priced at `topk_rule.expected_comparisons` of its
candidates for the first ``drawn`` ranks (`_ranks_drawn`). A cascade under a
small LIMIT is priced on the large tier it runs on: ``estimate_plan`` prices the plan as
``limit_chain.limit_input`` runs it, the rule lowering follows. Tests compare the estimate with executed calls
(``tests/cost_model/test_limit_cost.py``, ``tests/pipeline/test_limit_estimate_ray.py``).

>>> drawn_rows(5, 0.5, 0.5, 1000)  # k / s = 10, first round 10
20
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from semray.cost_model.cardinality import (
    DEFAULT_FILTER_SELECTIVITY,
    SEMANTIC_JOIN_SELECTIVITY,
    UNMEASURED_SELECTIVITY,
)
from semray.cost_model.embedding_cost import embedded_totals
from semray.cost_model.estimates import Interval, OperatorEstimate
from semray.cost_model.topk_rule import expected_comparisons
from semray.operators.base import Node
from semray.operators.join_sides import is_self_join
from semray.operators.plan_paths import child_paths, operator_paths
from semray.operators.relational import Filter, Limit, Project
from semray.operators.semantic import Semantic, SemJoin, SemTopK, is_row_semantic
from semray.tasks import TaskKind


def drawn_rows(wanted: int, selectivity: float, default_selectivity: float, available: float) -> int:
    """Rows a LIMIT's rounds draw: ``wanted / selectivity`` plus the first round (``wanted /
    default_selectivity``, what lowering sizes it from), at most ``available``."""
    needed = math.ceil(wanted / max(selectivity, 1e-9)) + math.ceil(wanted / max(default_selectivity, 1e-9))
    return int(min(max(available, 0.0), needed))


@dataclass(frozen=True, slots=True)
class _Link:
    path: str
    node: Node
    kind: str
    """``row`` (scaled by the rows drawn), ``factorized`` (left rows scaled, right side whole),
    ``self`` (a self-join: its rows scaled) or ``pairs`` (a pair join: its pairs scaled, the end)."""


def limit_stops(plan: Node, operators: Sequence[OperatorEstimate]) -> tuple[OperatorEstimate, ...]:
    """``operators`` with each semantic chain directly under a LIMIT priced at what its rounds draw
    (module doc); unchanged where no LIMIT has such a chain under it."""
    by_path = {operator.path: operator for operator in operators}
    for path, node in operator_paths(plan).items():
        if isinstance(node, Limit) and path in by_path:
            by_path.update(_top_only(node, path, by_path) or _stopped(node, path, by_path))
    return tuple(by_path[operator.path] for operator in operators)


def _stopped(limit: Limit, path: str, by_path: dict[str, OperatorEstimate]) -> dict[str, OperatorEstimate]:
    wanted = limit.count + limit.offset
    ((below_path, below),) = child_paths(limit, path)
    chain: list[_Link] = []
    estimated, default, semantic = 1.0, 1.0, False
    node, node_path = below, below_path
    under: tuple[str, Node] | None = None  # what the rounds draw from, when a stream of rows
    while node_path in by_path:
        estimate = by_path[node_path]
        if is_row_semantic(node) or isinstance(node, Filter | Project):
            chain.append(_Link(node_path, node, "row"))
            estimated *= _ratio(estimate.rows_out, estimate.rows_in)
            default *= _default_selectivity(node)
            semantic = semantic or is_row_semantic(node)
        elif isinstance(node, SemJoin) and node.implementation != "factorized":
            chain.append(_Link(node_path, node, "pairs"))
            estimated *= min(1.0, _ratio(estimate.rows_out, estimate.rows_in))  # blocked: of its candidates
            default *= SEMANTIC_JOIN_SELECTIVITY.value
            semantic = True
            break
        elif isinstance(node, SemJoin):
            (left_path, _), (right_path, _) = child_paths(node, node_path)
            left, right = by_path[left_path].rows_out.value, by_path[right_path].rows_out.value
            pair_share = _ratio(estimate.rows_out, Interval.exact(left * right))
            join_wanted = wanted / max(estimated, 1e-9)
            if is_self_join(node):
                chain.append(_Link(node_path, node, "self"))
                estimated *= math.sqrt(max(join_wanted, 1.0) * pair_share)
                default *= math.sqrt(max(wanted / max(default, 1e-9), 1.0) * SEMANTIC_JOIN_SELECTIVITY.value)
            else:
                chain.append(_Link(node_path, node, "factorized"))
                estimated *= pair_share * right if right else 1.0
                default *= SEMANTIC_JOIN_SELECTIVITY.value * right if right else 1.0
            semantic = True
        else:
            under = (node_path, node)
            break
        node, node_path = child_paths(node, node_path)[0][1], child_paths(node, node_path)[0][0]
    if not semantic:
        return {}
    bottom = chain[-1]
    available = _units_in(bottom, by_path)
    if available <= 0:
        return {}
    drawn = drawn_rows(wanted, estimated, default, available)
    share = drawn / available
    if share >= 1.0:
        return {}
    changed = {link.path: _scaled(link, by_path, share) for link in chain}
    unit = "pairs" if bottom.kind == "pairs" else "rows"
    note = (
        f"LIMIT {wanted} stops early: the chain under it asks about {drawn:,} of {available:,.0f} {unit} "
        f"(k / selectivity {math.ceil(wanted / max(estimated, 1e-9)):,} + first round "
        f"{math.ceil(wanted / max(default, 1e-9)):,})"
    )
    if under is not None and isinstance(under[1], SemTopK):
        changed[under[0]] = _ranks_drawn(under[1], under[0], by_path, drawn)
        note += f"; the top-{under[1].k} under it sorts only those {drawn:,} ranks"
    changed[path] = dataclasses.replace(by_path[path], rows_in=changed[below_path].rows_out, early_stop=note)
    return changed


def _top_only(limit: Limit, path: str, by_path: dict[str, OperatorEstimate]) -> dict[str, OperatorEstimate]:
    """A top-k right under a LIMIT that keeps fewer rows runs as the top ``count + offset``
    (lowering's ``relational._ranked_only``: fewer candidates, a quicksort that stops sooner), so its
    comparisons are `topk_rule.expected_comparisons` of that many; it still embeds every row."""
    wanted = limit.count + limit.offset
    ((below_path, below),) = child_paths(limit, path)
    if not isinstance(below, SemTopK) or wanted >= below.k or below_path not in by_path:
        return {}
    ((input_path, _),) = child_paths(below, below_path)
    rows = by_path[input_path].rows_out
    ranked = Interval(*(expected_comparisons(bound, wanted) for bound in (rows.value, rows.low, rows.high)))
    return {below_path: _compared(by_path[below_path], ranked, wanted)}


def _ranks_drawn(top: SemTopK, path: str, by_path: dict[str, OperatorEstimate], drawn: int) -> OperatorEstimate:
    """A top-k whose ranks a LIMIT's rounds draw from above (``set_ops.ranks_in_rounds``): its
    prefilter keeps ``prefilter_rows(k)`` candidates, its quicksort sorts the first ``drawn`` ranks."""
    ((input_path, _),) = child_paths(top, path)
    rows = by_path[input_path].rows_out
    ranked = Interval(*(expected_comparisons(bound, top.k, drawn) for bound in (rows.value, rows.low, rows.high)))
    return _compared(by_path[path], ranked, drawn)


def _compared(estimate: OperatorEstimate, comparisons: Interval, ranks: int) -> OperatorEstimate:
    """A top-k's ``estimate`` at ``comparisons`` and at most ``ranks`` rows out; its embeddings kept whole."""
    factor = _ratio(comparisons, estimate.rows_in)
    embedded_tokens, embedded_dollars = embedded_totals(estimate)
    return dataclasses.replace(
        estimate,
        rows_in=comparisons,
        rows_out=estimate.rows_out.minimum(float(ranks)),
        input_tokens=estimate.input_tokens.scale(factor) + embedded_tokens.scale(1.0 - factor),
        output_tokens=estimate.output_tokens.scale(factor),
        dollars=estimate.dollars.scale(factor) + embedded_dollars.scale(1.0 - factor),
        gpu_seconds=estimate.gpu_seconds.scale(factor),
        latency_s=estimate.latency_s.scale(factor),
    )


def _units_in(link: _Link, by_path: dict[str, OperatorEstimate]) -> float:
    """What the rounds draw from at the bottom of the chain: its input rows, a pair join's pairs,
    a factorized join's left rows."""
    estimate = by_path[link.path]
    if link.kind in ("factorized", "self"):
        left_path = child_paths(link.node, link.path)[0][0]
        return by_path[left_path].rows_out.value
    return estimate.rows_in.value


def _scaled(link: _Link, by_path: dict[str, OperatorEstimate], share: float) -> OperatorEstimate:
    estimate = by_path[link.path]
    factor = share
    if link.kind == "factorized":
        (left_path, _), (right_path, _) = child_paths(link.node, link.path)
        left, right = by_path[left_path].rows_out.value, by_path[right_path].rows_out.value
        node = link.node
        asked_right = 0.0 if isinstance(node, SemJoin) and node.right_labels else right
        calls = left + asked_right
        factor = (left * share + asked_right) / calls if calls else 1.0
    # A blocked join's sides are embedded whole whatever the LIMIT: only its model calls scale.
    embedded_tokens, embedded_dollars = embedded_totals(estimate)
    return dataclasses.replace(
        estimate,
        rows_in=estimate.rows_in.scale(factor),
        rows_out=estimate.rows_out.scale(share),
        input_tokens=estimate.input_tokens.scale(factor) + embedded_tokens.scale(1.0 - factor),
        output_tokens=estimate.output_tokens.scale(factor),
        dollars=estimate.dollars.scale(factor) + embedded_dollars.scale(1.0 - factor),
        gpu_seconds=estimate.gpu_seconds.scale(factor),
        latency_s=estimate.latency_s.scale(factor),
    )


def _ratio(out: Interval, into: Interval) -> float:
    return out.value / into.value if into.value > 0 else 1.0


def _default_selectivity(node: Node) -> float:
    """The share of rows lowering assumes ``node`` keeps when it sizes the first round."""
    if isinstance(node, Filter):
        return DEFAULT_FILTER_SELECTIVITY.value
    if isinstance(node, Semantic) and is_row_semantic(node) and node.task_kind() == TaskKind.FILTER:
        return UNMEASURED_SELECTIVITY.value
    return 1.0
