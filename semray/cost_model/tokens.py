"""Tokens per row of a semantic operator: the prompt exactly as the tier sends it, and the reply.

Input tokens are counted on the real prompt: the request execution sends,
`semray.serving.prompts.operators.row_request` of the operator's ``question()`` (its instruction
rendered over the row, wrapped in the task prompt of its kind), with the format instruction the tier adds
for a backend with native structured output, as a system + user chat. The count is the
simulator's (`semray.serving.simulator.tokens.TokenCounter.count_chat`: MiniLM WordPiece
tokens, +4 per message, +3 for the reply), so for simulated tiers it equals what is billed;
for other models it is an estimate of the same order (tokenizers differ by 10-30%).

Output tokens per row are expected figures per kind (`expected_output_tokens`), or measured
from answers (`count_answer_tokens`).

>>> from semray.operators import Scan, SemFilter, Schema, SourceSpec
>>> scan = Scan(source=SourceSpec(kind="csv", path="r.csv"), source_schema=Schema.of(("review", "VARCHAR")))
>>> node = SemFilter(input=scan, instruction="{review} is positive")
>>> counter = PromptTokens()
>>> counter.count(node, {"review": "great lamp"}) > counter.count(node, {"review": ""})
True
>>> expected_output_tokens(node)
1.0
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from semray.errors import SemrayError
from semray.operators.base import Node
from semray.operators.semantic import SemanticNode, SemSearch
from semray.serving.contract import ModelRequest
from semray.serving.prompts import format_instruction
from semray.serving.prompts.operators import row_request
from semray.serving.simulator.tokens import TokenCounter
from semray.tasks import Question, TaskKind

Row = Mapping[str, object]

MAP_OUTPUT_TOKENS = 32.0
"""Assumed reply length of a free-text SemMap or SemAgg answer until measured."""
EXTRACT_VALUE_TOKENS = 4.0
"""Assumed tokens of one extracted value in the JSON reply."""


class TokenEstimateError(SemrayError):
    """Tokens were asked of an operator that sends no prompt, or of no rows."""


def question_of(node: Node) -> Question:
    """The question an operator sends per row (``SemanticNode.question``: a SemJoin pair asks as a
    filter, a SemTopK's one record as a score, a SemAgg as a free-text answer)."""
    question = node.question() if isinstance(node, SemanticNode) else None
    if question is None:
        raise TokenEstimateError(
            f"{node.op} sends no LLM prompt; its tokens are the embedded text, see embedding_tokens"
        )
    return question


def task_kind(node: Node) -> TaskKind:
    """The prompt kind an operator is sent as (a SemJoin pair asks as a filter, a SemTopK as a score)."""
    return question_of(node).kind


def request_messages(request: ModelRequest) -> list[str]:
    """The system and user messages a tier sends for ``request``, with the format instruction it
    adds for a backend with native structured output."""
    extra = format_instruction(request.constraint, native_json=True, prompt=request.prompt)
    user = f"{request.prompt}\n\n{extra}" if extra else request.prompt
    return [text for text in (request.system, user) if text]


class PromptTokens:
    """Counts the chat prompt tokens of one row of a semantic operator.

    For a SemJoin the row holds both sides' cells under ``"l.column"`` and ``"r.column"``.
    """

    def __init__(self, counter: TokenCounter | None = None) -> None:
        self.counter = counter or TokenCounter()

    def messages(self, node: Node, row: Row) -> list[str]:
        """The system and user messages the tier would send for ``row`` (no truncation): the
        request execution builds (`row_request`), with the format instruction the tier adds."""
        return request_messages(row_request(question_of(node), row, request_id="estimate"))

    def count(self, node: Node, row: Row) -> int:
        return self.counter.count_chat(self.messages(node, row))

    def count_request(self, request: ModelRequest) -> int:
        """Prompt tokens of a request built elsewhere (a top-k's comparison), as the tier sends it."""
        return self.counter.count_chat(request_messages(request))

    def count_rows(self, node: Node, rows: Sequence[Row]) -> npt.NDArray[np.float64]:
        return np.array([self.count(node, row) for row in rows], dtype=np.float64)

    def count_text(self, text: str) -> int:
        return self.counter.count(text)


def expected_output_tokens(node: Node, counter: TokenCounter | None = None) -> float:
    """Expected completion tokens per row: the bare answer a tier gives for this kind.

    filter / join pair / score / top-k: 1 token (``Yes``, ``No``, a number); classify: the
    labels' mean token count; extract: the JSON object with `EXTRACT_VALUE_TOKENS` per value;
    map and SemAgg: `MAP_OUTPUT_TOKENS` (measure it with `count_answer_tokens` when it matters).
    """
    if isinstance(node, SemSearch):
        return 0.0
    question = node.question() if isinstance(node, SemanticNode) else None
    kind = None if question is None else question.kind
    if kind in (TaskKind.FILTER, TaskKind.SCORE):
        return 1.0
    tokens = counter or TokenCounter()
    if question is not None and kind == TaskKind.CLASSIFY:
        return float(np.mean([max(tokens.count(label), 1) for label in question.choices]))
    if question is not None and kind == TaskKind.EXTRACT:
        skeleton = json.dumps({name: None for name, _ in question.fields})
        return tokens.count(skeleton) + EXTRACT_VALUE_TOKENS * len(question.fields)
    return MAP_OUTPUT_TOKENS


def count_answer_tokens(answers: Sequence[object], counter: TokenCounter | None = None) -> npt.NDArray[np.float64]:
    """Completion tokens of answers as a tier writes them (JSON for dicts; at least 1 each)."""
    tokens = counter or TokenCounter()
    counts = []
    for answer in answers:
        text = json.dumps(answer) if isinstance(answer, dict) else _bare(answer)
        counts.append(max(tokens.count(text), 1))
    return np.array(counts, dtype=np.float64)


def _bare(answer: object) -> str:
    if isinstance(answer, bool):
        return "Yes" if answer else "No"
    return "" if answer is None else str(answer)


def embedding_tokens(node: SemSearch, row: Row, counter: TokenCounter | None = None) -> int:
    """Tokens of the text a SemSearch embeds for one row."""
    value = row.get(node.column)
    return (counter or TokenCounter()).count("" if value is None else str(value))
