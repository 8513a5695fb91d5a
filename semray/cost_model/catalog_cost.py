"""The cost of a SemSearch ranked by the catalog's own indexes: the query is the only text embedded.

A SemSearch whose input is the documents of a catalogued dataset (a Scan that ``read_catalog`` or
the planning agents pinned to a documents dataset, ``SourceSpec.catalog``, reached through
operators that only drop rows (filters, semi joins, a LIMIT) and projections that keep
``document_id`` and the searched ``text`` unchanged) lowers to a ``CatalogSearchStage``
(``semray.pipeline.workers.search``): its rows are ranked by the segments the catalog already
embedded and indexed. It costs one embedding call of the query (none for a full-text search)
instead of one per input row. ``catalogued_documents`` (``operators/catalogued.py``) is the one
definition of that shape: lowering asks it too, so the price and the stage cannot disagree.

>>> plan = read_catalog("notes").sem_search("text", "chest pain", k=5).plan  # doctest: +SKIP
>>> catalog_search_cost(plan, "plan", (Interval.exact(10_000.0),), context).input_tokens.value  # doctest: +SKIP
2.0
"""

from __future__ import annotations

from semray.cost_model.cardinality import estimated_rows
from semray.cost_model.cascade_cost import EMBEDDING_TIER
from semray.cost_model.estimates import Interval, OperatorEstimate
from semray.cost_model.plan_cost import EstimationContext, model_estimate
from semray.operators.catalogued import catalogued_documents as catalogued_documents  # one definition, re-exported
from semray.operators.catalogued import documents_below as documents_below
from semray.operators.semantic import SemSearch
from semray.serving.simulator.tokens import TokenCounter


def catalog_search_cost(
    node: SemSearch, path: str, inputs: tuple[Interval, ...], context: EstimationContext
) -> OperatorEstimate:
    """One embedding call of the query (none for ``fts``); the rows are ranked by the catalog's indexes."""
    (rows,) = inputs
    embeds = node.mode != "fts"
    query_tokens = query_embedding_tokens(node)
    return model_estimate(
        node,
        path,
        context,
        rows_in=rows,
        rows_out=estimated_rows(node, inputs, context),
        calls=Interval.exact(1.0 if embeds else 0.0),
        input_tokens=Interval.exact(query_tokens),
        output_tokens=Interval.exact(0.0),
        tier=context.tiers.get(path, EMBEDDING_TIER),
        quality=1.0,
    )


def query_embedding_tokens(node: SemSearch) -> float:
    """Tokens of the query's one embedding call: none for a full-text search, which embeds nothing."""
    return float(max(TokenCounter().count(node.query), 1)) if node.mode != "fts" else 0.0
