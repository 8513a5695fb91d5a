"""Cost estimators of the semantic operators: calls, tokens, dollars, latency and quality.

* Row-wise (SemFilter, SemMap, SemExtract, SemClassify): one call per input row; a SemFilter
  keeps ``rows * selectivity``, the others keep every row. On the ``cascade`` tier (a
  filter, classification or score with a quality target), `semray.cost_model.cascade_cost`
  prices the embedding, small and large tiers' shares of the rows.
* SemJoin: one call per pair judged: ``|L| * |R|`` nested, ``|L| * min(|R|, block_size(|R|))``
  blocked (``operators/join_sides.block_size``, the candidates lowering keeps per left row:
  ``cardinality.join_pairs``); it keeps ``selectivity`` of the pairs it judges (a blocked join
  can only keep candidates). A blocked join
  (``auto`` above ``NESTED_MAX_PAIRS``: ``operators/join_sides.join_implementation``) also embeds
  both sides' rows (`semray.cost_model.embedding_cost`). A factorized join asks each
  row of each side once (``|L| + |R|`` calls; ``|L|`` with ``right_labels``, which classifies the
  left rows into the right side's values; ``|L|`` for a self-join,
  ``operators/join_sides.is_self_join``): each side call is priced with the pair's prompt
  tokens when measured (an upper figure: a side prompt quotes one cell, a pair two), else the
  prompt with one cell, and the side's answer (a 1-token score when ordered, a label, or a
  free-text value). A checked factorization's verification and proposal calls are paid once, by
  the choice's own run before the plan runs (``pipeline/runs/plan_time/join_factorization_run.py``), not here.
* SemTopK: the comparisons its partial quicksort is expected to ask of its prefilter's candidates
  (`semray.cost_model.topk_rule`, the rule execution follows; ``rows_in`` counts them), each
  quoting two records, plus its rows and criterion embedded for the prefilter
  (`semray.cost_model.embedding_cost`); it keeps ``min(k, rows)``.
* SemAgg: one call per group (1 without keys; ``sqrt(rows)`` in ``[1, rows]`` unless a
  selectivity says groups per row) that quotes every row of its group: input tokens are
  ``rows * tokens_per_row``.
* SemSearch: embeds every input row on the embedding tier (its ``tokens_per_row`` is the
  embedded text); keeps ``min(k, rows)``; quality 1 (retrieval is not compared with a tier).
  Over catalogued documents only the query is embedded (`semray.cost_model.catalog_cost`).

Prompt tokens per row come from ``PlanStatistics.tokens_per_row`` (measure them with
`semray.cost_model.measure.measure_statistics` or `semray.cost_model.tokens.PromptTokens`;
unmeasured: `unmeasured_prompt_tokens`);
completion tokens from ``PlanStatistics.output_tokens_per_row`` or the per-kind expectation
`semray.cost_model.tokens.expected_output_tokens`. Output rows (what each operator keeps, above)
are its row rule's: `semray.cost_model.cardinality.estimated_rows`.
"""

from __future__ import annotations

from semray.cost_model.cardinality import estimated_rows, join_pairs
from semray.cost_model.cascade_cost import EMBEDDING_TIER, cascade_estimate
from semray.cost_model.catalog_cost import catalog_search_cost, catalogued_documents, query_embedding_tokens
from semray.cost_model.embedding_cost import blocked_join_embeddings, topk_embeddings, with_embeddings
from semray.cost_model.estimates import Interval, OperatorEstimate
from semray.cost_model.plan_cost import CASCADE_TIER, EstimationContext, model_estimate, register
from semray.cost_model.tokens import MAP_OUTPUT_TOKENS, PromptTokens, expected_output_tokens, question_of
from semray.cost_model.topk_rule import expected_comparisons
from semray.operators.base import Node
from semray.operators.join_sides import is_self_join, join_implementation
from semray.operators.keys import statistics_key
from semray.operators.plan import ROW_SEMANTIC
from semray.operators.semantic import SemAgg, SemJoin, SemSearch, SemTopK
from semray.operators.templates import template_columns
from semray.serving.prompts.set_ops import comparison_request, plain_question
from semray.serving.simulator.tokens import TokenCounter

ASSUMED_CELL_TOKENS = 100.0
"""Tokens assumed per referenced cell when nobody counted a sample (about 75 words)."""
MAX_CELL_TOKENS = 2000.0
"""The upper end assumed per cell: a long document."""
COMPARISON_ANSWER_TOKENS = 1.0
"""Completion tokens of a top-k comparison: ``Yes`` or ``No``."""


def prompt_tokens(node: Node, context: EstimationContext) -> Interval:
    key = statistics_key(node)
    found = context.statistics.tokens_per_row.get(key)
    if found is None:
        context.missing(
            "tokens_per_row",
            f"no prompt tokens per row measured for {node.label()} (key {key}); count them with "
            "semray.cost_model.tokens.PromptTokens on sample rows",
        )
        return unmeasured_prompt_tokens(node)
    return found


def unmeasured_prompt_tokens(node: Node) -> Interval:
    """The prompt with empty cells plus `ASSUMED_CELL_TOKENS` per cell, in [empty, `MAX_CELL_TOKENS` per cell]."""
    if isinstance(node, SemSearch):
        fixed, cells = 0.0, 1
    else:
        columns = template_columns(question_of(node).instruction, type(node).__name__)
        fixed, cells = float(PromptTokens().count(node, dict.fromkeys(columns, ""))), len(columns)
    return Interval(fixed + ASSUMED_CELL_TOKENS * cells, fixed, fixed + MAX_CELL_TOKENS * cells)


_FIXED_PROMPT_TOKENS: dict[str, float] = {}
"""statistics_key -> tokens of the operator's prompt with empty cells (counting costs ~0.4 ms)."""


def embedded_tokens(node: Node, prompt: Interval) -> Interval:
    """Tokens the embedding tier embeds per row: the prompt without its fixed part (instruction
    and task wrapper), at least 1."""
    key = statistics_key(node)
    if key not in _FIXED_PROMPT_TOKENS:
        _FIXED_PROMPT_TOKENS[key] = unmeasured_prompt_tokens(node).low
    fixed = _FIXED_PROMPT_TOKENS[key]
    return Interval(*(max(x - fixed, 1.0) for x in (prompt.value, prompt.low, prompt.high)))


def completion_tokens(node: Node, context: EstimationContext) -> Interval:
    found = context.statistics.output_tokens_per_row.get(statistics_key(node))
    return found if found is not None else Interval.exact(expected_output_tokens(node))


@register(*ROW_SEMANTIC, SemTopK)
def row_wise_cost(node: Node, path: str, inputs: tuple[Interval, ...], context: EstimationContext) -> OperatorEstimate:
    (rows,) = inputs
    rows_out = estimated_rows(node, inputs, context)
    tier = context.tier_of(node, path)
    if isinstance(node, SemTopK):  # its comparisons, plus its rows and criterion embedded
        cells = embedded_tokens(node, prompt_tokens(node, context))
        compared = _topk_comparisons(node, path, context, rows, rows_out, cells, tier)
        return with_embeddings(compared, topk_embeddings(node, rows, cells, context))
    if tier == CASCADE_TIER:
        prompt = prompt_tokens(node, context)
        return cascade_estimate(
            node,
            path,
            context,
            rows=rows,
            rows_out=rows_out,
            prompt=prompt,
            embedded=embedded_tokens(node, prompt),
            completion=completion_tokens(node, context),
        )
    return _on_tier(node, path, context, rows, rows_out, tier)


def _on_tier(
    node: Node, path: str, context: EstimationContext, rows: Interval, rows_out: Interval, tier: str
) -> OperatorEstimate:
    """One call per input row on ``tier``."""
    return model_estimate(
        node,
        path,
        context,
        rows_in=rows,
        rows_out=rows_out,
        calls=rows,
        input_tokens=rows * prompt_tokens(node, context),
        output_tokens=rows * completion_tokens(node, context),
        tier=tier,
        quality=context.quality(node, tier),
    )


def _topk_comparisons(
    node: SemTopK, path: str, context: EstimationContext, rows: Interval, rows_out: Interval, cells: Interval, tier: str
) -> OperatorEstimate:
    """A top-k's comparisons (`semray.cost_model.topk_rule.expected_comparisons`, the rule
    execution follows), each quoting two records (``cells`` tokens each) in the comparison prompt
    and answered Yes or No; ``rows_in`` counts the comparisons, as a join's counts its pairs."""
    compared = Interval(*(expected_comparisons(bound, node.k) for bound in (rows.value, rows.low, rows.high)))
    return model_estimate(
        node,
        path,
        context,
        rows_in=compared,
        rows_out=rows_out,
        calls=compared,
        input_tokens=compared * (cells.scale(2.0) + Interval.exact(_comparison_prompt_tokens(node))),
        output_tokens=compared.scale(COMPARISON_ANSWER_TOKENS),
        tier=tier,
        quality=context.quality(node, tier),
    )


def _comparison_prompt_tokens(node: SemTopK) -> float:
    """Tokens of a top-k's comparison prompt with empty records, as the tier sends it."""
    request = comparison_request(plain_question(node.instruction), "", "", request_id="estimate")
    return float(PromptTokens().count_request(request))


@register(SemJoin)
def join_cost(node: Node, path: str, inputs: tuple[Interval, ...], context: EstimationContext) -> OperatorEstimate:
    left, right = inputs
    tier = context.tier_of(node, path)
    if isinstance(node, SemJoin) and node.implementation == "factorized":
        return _factorized_join_cost(node, path, inputs, context, tier)
    assert isinstance(node, SemJoin)
    blocked = join_implementation(node, left.value, right.value) == "blocked"
    pairs = join_pairs(node, left, right)
    prompt = prompt_tokens(node, context)
    judged = model_estimate(
        node,
        path,
        context,
        rows_in=pairs,
        rows_out=estimated_rows(node, inputs, context),
        calls=pairs,
        input_tokens=pairs * prompt,
        output_tokens=pairs * completion_tokens(node, context),
        tier=tier,
        quality=context.quality(node, tier),
    )
    if not blocked:
        return judged
    return with_embeddings(judged, blocked_join_embeddings(node, left, right, embedded_tokens(node, prompt), context))


def _factorized_join_cost(
    node: SemJoin, path: str, inputs: tuple[Interval, ...], context: EstimationContext, tier: str
) -> OperatorEstimate:
    """A factorized join: one side question per row of each side (the left side only with
    ``right_labels``, and one side of a self-join, whose two sides are one question of one relation)."""
    left, right = inputs
    calls = left if node.right_labels or is_self_join(node) else left + right
    return model_estimate(
        node,
        path,
        context,
        rows_in=calls,
        rows_out=estimated_rows(node, inputs, context),
        calls=calls,
        input_tokens=calls * _side_prompt_tokens(node, context),
        output_tokens=calls.scale(_side_answer_tokens(node)),
        tier=tier,
        quality=context.quality(node, tier),
    )


def _side_prompt_tokens(node: SemJoin, context: EstimationContext) -> Interval:
    """Prompt tokens of one side question: the pair's when measured (an upper figure), else one cell's prompt."""
    if statistics_key(node) in context.statistics.tokens_per_row:
        return prompt_tokens(node, context)
    fixed = prompt_tokens(node, context).low  # unmeasured: the prompt with empty cells (recorded as missing)
    return Interval(fixed + ASSUMED_CELL_TOKENS, fixed, fixed + MAX_CELL_TOKENS)


def _side_answer_tokens(node: SemJoin) -> float:
    """Completion tokens of one side answer: a score (ordered), a label, or a free-text value."""
    if node.relation in ("<", ">"):
        return 1.0
    if node.labels:
        counter = TokenCounter()
        return sum(max(counter.count(label), 1) for label in node.labels) / len(node.labels)
    return MAP_OUTPUT_TOKENS


@register(SemAgg)
def aggregate_cost(node: Node, path: str, inputs: tuple[Interval, ...], context: EstimationContext) -> OperatorEstimate:
    (rows,) = inputs
    groups = estimated_rows(node, inputs, context)
    tier = context.tier_of(node, path)
    return model_estimate(
        node,
        path,
        context,
        rows_in=rows,
        rows_out=groups,
        calls=groups,
        input_tokens=rows * prompt_tokens(node, context),
        output_tokens=groups * completion_tokens(node, context),
        tier=tier,
        quality=context.quality(node, tier),
    )


@register(SemSearch)
def search_cost(node: Node, path: str, inputs: tuple[Interval, ...], context: EstimationContext) -> OperatorEstimate:
    if isinstance(node, SemSearch) and catalogued_documents(node) is not None:
        return catalog_search_cost(node, path, inputs, context)  # the catalog's vectors: only the query is embedded
    assert isinstance(node, SemSearch)
    (rows,) = inputs
    tier = context.tiers.get(path, EMBEDDING_TIER)
    # A run-scoped index embeds every row and the query (vector, hybrid); a full-text one embeds nothing.
    embeds = Interval.exact(1.0 if node.mode != "fts" else 0.0)
    query = Interval.exact(query_embedding_tokens(node))
    return model_estimate(
        node,
        path,
        context,
        rows_in=rows,
        rows_out=estimated_rows(node, inputs, context),
        calls=rows * embeds + embeds,
        input_tokens=rows * prompt_tokens(node, context) * embeds + query,
        output_tokens=Interval.exact(0.0),
        tier=tier,
        quality=1.0,
    )
