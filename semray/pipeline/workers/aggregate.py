"""SemAgg: answer a question over each group of rows, map-reduce when a group exceeds the context.

A group's records (each row rendered with the record template) are packed in row order into
chunks whose prompt fits ``context_tokens``; every row lands in exactly one chunk (a row too
long for any chunk gets one of its own, and the tier's truncation policy cuts it). One chunk:
one call answers. Several: each leaf gives partial counts, then combine calls merge the leaf
answers, packed the same way, level by level until one call gives the answer.

>>> pack([3, 3, 3, 9], budget=7)
[[0, 1], [2], [3]]
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from semray.operators.schema import ROW_ID
from semray.pipeline.stages.set_ops import AggStage
from semray.pipeline.workers.batch_sql import empty_table
from semray.pipeline.workers.journaled_questions import JournaledAsker
from semray.pipeline.workers.metering import operator_name
from semray.serving.deployments import TierHandles
from semray.serving.prompts.render import render_prompt
from semray.serving.prompts.set_ops import AGG_MAX_TOKENS, aggregate_request, combine_request, leaf_overhead
from semray.serving.truncation import TOKENS_PER_MESSAGE, TOKENS_PER_REPLY, count_tokens
from semray.transactions import BatchLedger

RECORD_OVERHEAD = 3
"""Tokens of a record's number and line break (``12. ``)."""
GLOBAL_GROUP = "all"


def pack(sizes: Sequence[int], budget: int) -> list[list[int]]:
    """Indices of items in order, cut into runs whose sizes sum to at most ``budget`` each."""
    chunks: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index, size in enumerate(sizes):
        if current and used + size > budget:
            chunks.append(current)
            current, used = [], 0
        current.append(index)
        used += size
    if current:
        chunks.append(current)
    return chunks


@dataclass
class AggregationTrace:
    """Which rows each leaf call saw, and how many combine calls there were (for tests)."""

    leaves: list[list[int]] = field(default_factory=list)
    combines: int = 0
    levels: int = 0


def record_budget(question: str, context_tokens: int) -> int:
    """Tokens left for records in one call: the context minus the prompt's fixed text and the reply."""
    fixed = count_tokens(leaf_overhead(question)) + 2 * TOKENS_PER_MESSAGE + TOKENS_PER_REPLY
    return max(1, context_tokens - AGG_MAX_TOKENS - fixed)


def aggregate_group(
    group_id: str,
    question: str,
    records: list[str],
    context_tokens: int,
    asker: JournaledAsker,
    trace: AggregationTrace | None = None,
) -> str | None:
    """The answer of ``question`` over ``records`` (None when the model gave none)."""
    trace = trace if trace is not None else AggregationTrace()
    budget = record_budget(question, context_tokens)
    chunks = pack([count_tokens(record) + RECORD_OVERHEAD for record in records], budget)
    trace.leaves.extend(chunks)
    if len(chunks) <= 1:
        request = aggregate_request(question, records, partial=False, request_id=f"{group_id}:answer")
        return asker.ask([request])[request.request_id]
    requests = [
        aggregate_request(question, [records[i] for i in chunk], partial=True, request_id=f"{group_id}:leaf:{n}")
        for n, chunk in enumerate(chunks)
    ]
    answers = asker.ask(requests)
    parts = [answers[request.request_id] or "" for request in requests]
    level = 0
    while True:
        level += 1
        trace.levels = level
        groups = pack([count_tokens(part) + RECORD_OVERHEAD for part in parts], budget)
        if len(groups) == len(parts):
            # Answers too long to pair within the budget: combine two at a time anyway (the
            # tier's truncation policy applies), so every level halves the parts and ends.
            groups = [list(range(start, min(start + 2, len(parts)))) for start in range(0, len(parts), 2)]
        final = len(groups) == 1
        combine = [
            combine_request(
                question, [parts[i] for i in chunk], partial=not final, request_id=f"{group_id}:combine:{level}:{n}"
            )
            for n, chunk in enumerate(groups)
        ]
        trace.combines += len(combine)
        answers = asker.ask(combine)
        parts = [answers[request.request_id] or "" for request in combine]
        if final:
            return answers[combine[0].request_id]


def group_id(keys: dict[str, object]) -> str:
    """The output row id of a group: ``all`` without keys, else a digest of the key values."""
    if not keys:
        return GLOBAL_GROUP
    text = "\x1f".join("\\N" if value is None else str(value) for value in keys.values())
    return "g:" + hashlib.md5(text.encode()).hexdigest()


def aggregate_rows(
    table: pa.Table,
    stage: AggStage,
    tiers: TierHandles,
    ledger: BatchLedger | None,
    trace: AggregationTrace | None = None,
) -> pa.Table:
    """One output row per group (one row for all rows without keys, even none)."""
    asker = JournaledAsker(tiers, stage.task.tier, ledger, stage.operator_key, operator_name(stage.task, "SemAgg"))
    groups: dict[tuple[object, ...], list[str]] = {}
    for row in table.to_pylist():
        key = tuple(row[name] for name in stage.keys)
        groups.setdefault(key, []).append(render_prompt(stage.record_template, row, allow_non_string=True).text)
    if not stage.keys and not groups:
        groups[()] = []
    columns: dict[str, list[object]] = {ROW_ID: [], **{name: [] for name in stage.keys}, stage.output: []}
    for key, records in groups.items():
        values = dict(zip(stage.keys, key, strict=True))
        identifier = group_id(values)
        answer = (
            aggregate_group(identifier, stage.question, records, stage.context_tokens, asker, trace)
            if records
            else None
        )
        columns[ROW_ID].append(identifier)
        for name, value in values.items():
            columns[name].append(value)
        columns[stage.output].append(answer)
    types = dict(stage.input_columns)
    typed = ((ROW_ID, "VARCHAR"), *((name, types[name]) for name in stage.keys), (stage.output, "VARCHAR"))
    schema = empty_table(typed).schema
    return pa.table(columns, schema=schema)
