"""The cost estimator of SemCode: model calls at plan time only, CPU at execution.

* Without code: the large tier writes the function and validates it on ``sample_rows`` rows
  (with ``max_sample_rows``, the optimizer's statistical decision: one round of ``sample_rows``
  rows at least, ``max_sample_rows`` at most, expected ``bounds.rows_to_accept``):
  one generation call (up to ``1 + RETRIES`` when validation fails: the interval's high end)
  whose prompt carries the instruction, the rules and up to 10 sample rows, and, with
  ``min_agreement``, one per-row answer for each sample row (an extraction of the output fields).
  These calls are priced on the large tier; their number does not grow with the input.
* With code (supplied, or generated and committed): no model call, no dollars, tier ``none``;
  the function runs in the sandbox on CPU, which the cost model does not price.

Rows: every input row gives one output row (its row rule, `semray.cost_model.cardinality`).
"""

from __future__ import annotations

import json

from semray.cost_model.bounds import rows_to_accept
from semray.cost_model.cardinality import estimated_rows
from semray.cost_model.estimates import ZERO, Interval, OperatorEstimate
from semray.cost_model.plan_cost import NO_TIER, EstimationContext, model_estimate, register
from semray.cost_model.semantic_cost import ASSUMED_CELL_TOKENS, MAX_CELL_TOKENS
from semray.operators.base import Node
from semray.operators.code import SemCode
from semray.serving.prompts.code import CODE_MAX_TOKENS, MAX_SHOWN_ROWS, code_request
from semray.serving.prompts.operators import build_request
from semray.serving.simulator.tokens import TokenCounter
from semray.tasks import TaskKind

GENERATION_ATTEMPTS = Interval(1.0, 1.0, 3.0)
"""Generation calls: one when the first function passes, three after two retries."""
CODE_OUTPUT_TOKENS = Interval(300.0, 60.0, float(CODE_MAX_TOKENS))
"""Tokens of one written function."""


@register(SemCode)
def code_cost(node: Node, path: str, inputs: tuple[Interval, ...], context: EstimationContext) -> OperatorEstimate:
    assert isinstance(node, SemCode)
    (rows,) = inputs
    rows_out = estimated_rows(node, inputs, context)
    if node.committed:
        return OperatorEstimate(path, node.label(), NO_TIER, rows, rows_out, ZERO, ZERO, ZERO, ZERO, ZERO, 1.0)
    counter = TokenCounter()
    cells = len(node.inputs)
    sample = rows.minimum(float(node.sample_rows))
    shown = sample.minimum(float(MAX_SHOWN_ROWS))
    request = code_request(node.instruction, [(name, "") for name in node.inputs], node.output_types(), [], [])
    fixed = float(counter.count_chat([request.system or "", request.prompt]))
    per_row = Interval(ASSUMED_CELL_TOKENS * cells, 1.0 * cells, MAX_CELL_TOKENS * cells)
    generation_in = GENERATION_ATTEMPTS * (Interval.exact(fixed) + shown * per_row)
    calls = GENERATION_ATTEMPTS
    input_tokens = generation_in
    output_tokens = GENERATION_ATTEMPTS * CODE_OUTPUT_TOKENS
    if node.min_agreement is not None:
        asked = build_request(TaskKind.EXTRACT, node.instruction, request_id="estimate", fields=node.output_types())
        row_fixed = float(counter.count_chat([asked.system or "", asked.prompt]))
        answer = float(counter.count(json.dumps({name: None for name, _ in node.output_types()}))) + 4.0 * len(
            node.outputs
        )
        checked = validation_rows(node, rows)
        calls = calls + checked
        input_tokens = input_tokens + checked * (Interval.exact(row_fixed) + per_row)
        output_tokens = output_tokens + checked.scale(answer)
    return model_estimate(
        node,
        path,
        context,
        rows_in=rows,
        rows_out=rows_out,
        calls=calls,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        tier="large",
        quality=node.min_agreement if node.min_agreement is not None else 1.0,
    )


def validation_rows(node: SemCode, rows: Interval) -> Interval:
    """Rows the model answers for validation: ``sample_rows``, or with ``max_sample_rows`` the
    rounds of the statistical decision: as few as one round, as many as the cap, and expected as
    many as a function agreeing on every row needs to be accepted (`bounds.rows_to_accept`)."""
    if node.max_sample_rows is None or node.min_agreement is None:
        return rows.minimum(float(node.sample_rows))
    expected = rows_to_accept(node.min_agreement, node.sample_rows, node.max_sample_rows, node.confidence)
    return Interval.spanning(
        min(rows.value, float(expected)),
        min(rows.low, float(node.sample_rows)),
        min(rows.high, float(node.max_sample_rows)),
    )
