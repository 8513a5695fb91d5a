"""SemTopK: an embedding prefilter, then a partial quicksort whose comparisons go out in batches.

Each round partitions every unsorted segment that still overlaps the first ``k`` positions
around a pivot; all of a round's comparisons (item vs its segment's pivot) are one batch.
Segments wholly past position ``k`` are dropped. Expected comparisons: about ``2n + 2k ln k``
(quickselect plus sorting the top k), in ``O(log n)`` rounds.

>>> order, asked = partial_quicksort(list(range(10)), 3, lambda pairs: [a > b for a, b in pairs])
>>> order
[9, 8, 7]
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from semray.operators.schema import ROW_ID
from semray.pipeline.stages.set_ops import VECTOR, TopKStage
from semray.pipeline.workers.embed_batches import journaled_embedding
from semray.pipeline.workers.journaled_questions import JournaledAsker
from semray.pipeline.workers.metering import operator_name
from semray.serving.deployments import TierHandles
from semray.serving.prompts.render import render_prompt
from semray.serving.prompts.set_ops import comparison_request
from semray.transactions import BatchLedger

CRITERION_BATCH = "sem-topk-criterion"
"""The batch id under which a top-k's criterion embedding is committed (no input row: it counts no rows)."""

Better = Callable[[list[tuple[Any, Any]]], list[bool]]
"""Answers a batch of (a, b): is a better than b?"""


def _pivot(segment: Sequence[Any]) -> int:
    """Index of the pivot: pseudo-random but deterministic, so a resume asks the same questions."""
    digest = hashlib.blake2b("\x00".join(map(str, segment)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % len(segment)


def partial_quicksort(items: list[Any], k: int, better: Better) -> tuple[list[Any], int]:
    """The best ``k`` items, best first, and how many comparisons were asked."""
    segments: list[list[Any]] = [list(items)] if items else []
    asked = 0
    while True:
        segments = _cut(segments, k)
        work: list[tuple[int, Any, list[Any]]] = []
        for index, segment in enumerate(segments):
            if len(segment) > 1:
                chosen = _pivot(segment)
                work.append((index, segment[chosen], segment[:chosen] + segment[chosen + 1 :]))
        if not work:
            break
        pairs = [(item, pivot) for _, pivot, others in work for item in others]
        answers = iter(better(pairs))
        asked += len(pairs)
        replaced: dict[int, list[list[Any]]] = {}
        for index, pivot, others in work:
            verdicts = [next(answers) for _ in others]
            above = [item for item, wins in zip(others, verdicts, strict=True) if wins]
            below = [item for item, wins in zip(others, verdicts, strict=True) if not wins]
            replaced[index] = [part for part in (above, [pivot], below) if part]
        segments = [part for index, segment in enumerate(segments) for part in replaced.get(index, [segment])]
    order = [segment[0] for segment in segments]
    return order[:k], asked


def _cut(segments: list[list[Any]], k: int) -> list[list[Any]]:
    kept, position = [], 0
    for segment in segments:
        if position >= k:
            break
        kept.append(segment)
        position += len(segment)
    return kept


@dataclass(frozen=True, slots=True)
class RankOutcome:
    table: pa.Table
    comparisons: int
    candidates: int


def rank_rows(table: pa.Table, stage: TopKStage, tiers: TierHandles, ledger: BatchLedger | None) -> RankOutcome:
    """The top ``stage.k`` rows of ``table`` (with vectors) ranked 1..k in ``stage.output``."""
    columns = [name for name, _ in stage.input_columns if name != VECTOR]
    if table.num_rows == 0:
        return RankOutcome(table.select(columns).append_column(stage.output, pa.array([], pa.int64())), 0, 0)
    vectors = np.asarray(table.column(VECTOR).to_pylist(), dtype=np.float32)
    query = journaled_embedding(stage.criterion, stage.operator_key, CRITERION_BATCH, tiers, ledger)
    similarity = vectors @ query
    keep = min(stage.prefilter, table.num_rows)
    candidates = sorted(np.argsort(-similarity, kind="stable")[:keep].tolist())
    rows = table.to_pylist()
    ids = [str(row[ROW_ID]) for row in rows]
    records = [render_prompt(stage.record_template, row, allow_non_string=True).text for row in rows]
    asker = JournaledAsker(tiers, stage.task.tier, ledger, stage.operator_key, operator_name(stage.task, "SemTopK"))

    def better(pairs: list[tuple[Any, Any]]) -> list[bool]:
        requests = [
            comparison_request(stage.criterion, records[a], records[b], request_id=f"{ids[a]}>{ids[b]}")
            for a, b in pairs
        ]
        answers = asker.ask(requests)
        return [(answers.get(request.request_id) or "").strip().lower() == "yes" for request in requests]

    order, asked = partial_quicksort(candidates, stage.k, better)
    top = table.select(columns).take(pa.array(order, pa.int64()))
    ranked = top.append_column(stage.output, pa.array(range(1, len(order) + 1), pa.int64()))
    return RankOutcome(ranked, asked, keep)
