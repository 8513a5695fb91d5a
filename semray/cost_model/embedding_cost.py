"""What an operator embeds besides its model calls, priced on the embedding tier.

Execution embeds, and counts in ``Result.usage`` (one call per text, the text's tokens, the
embedding tier's input price: ``pipeline/workers/embed_batches.py``):

* a blocked SemJoin: every row of both sides, through the cells the instruction reads of each
  (``|L| + |R|`` texts; ``|L|`` when both sides are one relation read through the same cells,
  ``join_sides.reads_one_relation``: their texts are the same, embedded once);
* a SemTopK: every input row, to keep its prefilter's candidates, and its criterion once.

Each is an `EmbeddingEstimate` on the operator's estimate (its own line in EXPLAIN), added to the
operator's ``input_tokens`` and ``dollars`` so the plan's total and ``--max-cost`` include it.
Tokens per text: the operator's measured prompt without its fixed part (``embedded_tokens``),
shared between the sides by the cells each reads; unmeasured, `ASSUMED_CELL_TOKENS` per cell.

>>> from semray.cost_model.prices import TierProfile
>>> embedding = TierProfile("embedding", 0.02, 0.0, 0.0, float("inf"), 8)
>>> embedded_texts("left side", Interval.exact(1000), Interval.exact(50), embedding).dollars.value
0.001
"""

from __future__ import annotations

import dataclasses

from semray.cost_model.cascade_cost import EMBEDDING_TIER
from semray.cost_model.estimates import EmbeddingEstimate, Interval, OperatorEstimate, total
from semray.cost_model.plan_cost import EstimationContext
from semray.cost_model.prices import TierProfile
from semray.operators.join_sides import reads_one_relation, side_cells
from semray.operators.semantic import SemJoin, SemTopK
from semray.serving.prompts.set_ops import plain_question
from semray.serving.simulator.tokens import TokenCounter


def embedded_texts(
    what: str, texts: Interval, tokens_per_text: Interval, profile: TierProfile | None
) -> EmbeddingEstimate:
    """``texts`` embedded at ``tokens_per_text`` each, priced at ``profile``'s input fee (no
    profile: no price, as a plan priced without an embedding tier)."""
    tokens = texts * tokens_per_text
    fee = profile.fee_in_per_m if profile is not None else 0.0
    return EmbeddingEstimate(what, texts, tokens, tokens.scale(fee / 1e6))


def blocked_join_embeddings(
    node: SemJoin, left: Interval, right: Interval, cell_tokens: Interval, context: EstimationContext
) -> tuple[EmbeddingEstimate, ...]:
    """A blocked join's two sides, each row embedded through the cells it reads; ``cell_tokens``:
    the tokens of all the cells one pair's prompt quotes, shared by the cells each side reads. One
    relation read through the same cells on both sides (``join_sides.reads_one_relation``) is
    embedded once: one line, its rows."""
    left_cells, right_cells = len(side_cells(node, "l")), len(side_cells(node, "r"))
    cells = max(left_cells + right_cells, 1)
    profile = context.profiles.get(EMBEDDING_TIER)
    if reads_one_relation(node):
        return (embedded_texts("rows of both sides", left, cell_tokens.scale(max(left_cells, 1) / cells), profile),)
    return (
        embedded_texts("left side", left, cell_tokens.scale(max(left_cells, 1) / cells), profile),
        embedded_texts("right side", right, cell_tokens.scale(max(right_cells, 1) / cells), profile),
    )


def topk_embeddings(
    node: SemTopK, rows: Interval, row_tokens: Interval, context: EstimationContext
) -> tuple[EmbeddingEstimate, ...]:
    """A top-k's input rows (its prefilter ranks them by similarity) and its criterion, once."""
    profile = context.profiles.get(EMBEDDING_TIER)
    criterion = float(max(TokenCounter().count(plain_question(node.instruction)), 1))
    return (
        embedded_texts("rows", rows, row_tokens, profile),
        embedded_texts("criterion", Interval.exact(1.0), Interval.exact(criterion), profile),
    )


def with_embeddings(estimate: OperatorEstimate, embeddings: tuple[EmbeddingEstimate, ...]) -> OperatorEstimate:
    """``estimate`` with ``embeddings`` added: its own lines, and in its tokens and dollars."""
    if not embeddings:
        return estimate
    return dataclasses.replace(
        estimate,
        embeddings=estimate.embeddings + embeddings,
        input_tokens=estimate.input_tokens + total([part.input_tokens for part in embeddings]),
        dollars=estimate.dollars + total([part.dollars for part in embeddings]),
    )


def embedded_totals(estimate: OperatorEstimate) -> tuple[Interval, Interval]:
    """(input tokens, dollars) of ``estimate``'s embeddings, all parts together."""
    return (
        total([part.input_tokens for part in estimate.embeddings]),
        total([part.dollars for part in estimate.embeddings]),
    )
