"""The cost of a SemSearch ranked by the catalog's own indexes: the query is the only text embedded.

A SemSearch whose input is the documents of a catalogued dataset (a Scan that ``read_catalog`` or
the planning agents pinned to a documents dataset, ``SourceSpec.catalog``, reached through
operators that only drop rows (filters, semi joins, a LIMIT) and projections that keep
``document_id`` and the searched ``text`` unchanged) lowers to a ``CatalogSearchStage``
(``semray.pipeline.set_search``): its rows are ranked by the segments the catalog already
embedded and indexed. It costs one embedding call of the query (none for a full-text search)
instead of one per input row. ``catalogued_documents`` is the one definition of that shape:
lowering asks it too, so the price and the stage cannot disagree.

>>> plan = read_catalog("notes").sem_search("text", "chest pain", k=5).plan  # doctest: +SKIP
>>> catalog_search_cost(plan, "plan", (Interval.exact(10_000.0),), context).input_tokens.value  # doctest: +SKIP
2.0
"""

from __future__ import annotations

from sqlglot import exp

from semray.cost_model.cardinality import estimated_rows
from semray.cost_model.cascade_cost import EMBEDDING_TIER
from semray.cost_model.estimates import Interval, OperatorEstimate
from semray.cost_model.plan_cost import EstimationContext, model_estimate
from semray.operators.base import Node
from semray.operators.expressions import parse_expression
from semray.operators.relational import DOCUMENT_KEY, DOCUMENT_TEXT, CatalogPin, Limit, Project, Scan
from semray.operators.schema import ROW_ID
from semray.operators.semantic import SemSearch
from semray.serving.simulator.tokens import TokenCounter


def catalogued_documents(node: SemSearch) -> tuple[CatalogPin, str] | None:
    """The pin of the catalogued documents ``node`` searches and the input column naming each row's document.

    None when the search must embed its input (any input that is not such documents, a computed
    ``text``, or no column keeping ``document_id``).
    """
    found = documents_below(node.input)
    if found is None:
        return None
    pin, names = found
    if names.get(node.column) != DOCUMENT_TEXT:
        return None
    keys = [name for name, source in names.items() if source == DOCUMENT_KEY]
    return (pin, keys[0]) if keys else None


def documents_below(node: Node) -> tuple[CatalogPin, dict[str, str]] | None:
    """The pinned documents dataset whose rows ``node`` outputs, with each output column's documents column.

    ``node`` must reach a Scan pinned to a documents dataset through operators that only drop rows and
    projections; a column computed on the way is left out of the mapping. None for any other plan.
    """
    names = {name: name for name in node.output_schema.names if name != ROW_ID}
    current: Node = node
    while not isinstance(current, Scan):
        if isinstance(current, Project):
            below = {item.name: _bare_column(item.expr) for item in current.exprs}
            names = {name: source for name, at in names.items() if (source := below.get(at)) is not None}
        elif not (current.drops_rows_only() or isinstance(current, Limit)):
            # A LIMIT keeps some rows unchanged too: the search ranks the documents it kept (their ids
            # restrict the catalog's indexes), so ``SemSearch`` over ``read_catalog(...).limit(n)`` embeds
            # the query, not n rows.
            return None
        current = current.children[0]
    pin = current.source.catalog
    return (pin, names) if pin is not None and pin.documents else None


def _bare_column(expression: str) -> str | None:
    """The column an expression is, unchanged (``text``, ``"text"``), or None for any computation."""
    tree = parse_expression(expression, "Project")
    return tree.name if isinstance(tree, exp.Column) and not tree.table else None


def catalog_search_cost(
    node: SemSearch, path: str, inputs: tuple[Interval, ...], context: EstimationContext
) -> OperatorEstimate:
    """One embedding call of the query (none for ``fts``); the rows are ranked by the catalog's indexes."""
    (rows,) = inputs
    embeds = node.mode != "fts"
    query_tokens = float(max(TokenCounter().count(node.query), 1)) if embeds else 0.0
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
