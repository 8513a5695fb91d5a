"""Prune a semantic filter on a topic of an organised, catalogued collection by the stored topic labels.

A choice, not in ``RULES``: it trades recall for calls. The filter still judges every document it
sees, so no document it rejects is kept (precision unchanged); a document the catalog's classifier
labelled with another topic is not asked about, so recall is bounded by the classifier's agreement
with the model (``semray catalog show``: ``Organization.agreement``). The caller asks for it with
labels read from the catalog (``semray.catalog.topic_pruning.TopicLabels``): ``Settings.topic_pruning``
or ``Query.with_topic_pruning()`` has the Query pass them to ``optimize_plan(..., topic_labels=...)``,
which applies this rule before ``RULES`` (docs/catalog.md, "Pruning a semantic filter by topic labels").

Precondition: a ``SemFilter`` whose input is the documents of a catalogued dataset
(``operators.catalogued.documents_below``: a pinned documents Scan under operators that only drop
rows and projections) with a column still holding ``document_id``, and ``labels(pin, instruction)``
naming the documents labelled under the topic the instruction names (None: leave it).

Before::

    SemFilter '{text} is about cardiology'
    └─ Scan catalog:notes@v4

After::

    SemFilter '{text} is about cardiology'
    └─ Filter "document_id" IN ('a.md', 'c.md')
       └─ Scan catalog:notes@v4
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from semray.operators.base import Node, transform
from semray.operators.catalogued import documents_below
from semray.operators.relational import DOCUMENT_KEY, CatalogPin, Filter
from semray.operators.semantic import SemFilter
from semray.sql_quoting import quote_identifier, quote_literal

TopicDocuments = Callable[[CatalogPin, str], Sequence[str] | None]
"""(pin, instruction) -> ids of the documents labelled under the topic the instruction names, or None."""


def prune_by_topic(plan: Node, labels: TopicDocuments) -> Node:
    """Put a filter on the labelled documents below every semantic filter on a topic of catalogued documents."""
    return transform(plan, lambda node: _prune(node, labels))


def _prune(node: Node, labels: TopicDocuments) -> Node:
    if not isinstance(node, SemFilter) or node.diagnostics:
        return node
    found = documents_below(node.input)
    if found is None:
        return node
    pin, names = found
    keys = [name for name, source in names.items() if source == DOCUMENT_KEY]
    if not keys:
        return node
    documents = labels(pin, node.instruction)
    if documents is None:
        return node
    predicate = topic_predicate(keys[0], documents)
    if isinstance(node.input, Filter) and node.input.predicate == predicate:
        return node  # pruned already
    return node.with_children((Filter(input=node.input, predicate=predicate),))


def topic_predicate(column: str, documents: Sequence[str]) -> str:
    """The SQL predicate keeping ``documents``: ``topic_predicate("doc", ["a.md"]) == '"doc" IN (\\'a.md\\')'``."""
    if not documents:
        return "FALSE"
    return f"{quote_identifier(column)} IN ({', '.join(quote_literal(document) for document in sorted(documents))})"
