"""SemTopK: an embedding prefilter, then a partial quicksort whose comparisons go out in batches.

Each round partitions every unsorted segment that still overlaps the first ``k`` positions
around a pivot; all of a round's comparisons (item vs its segment's pivot) are one batch.
Segments wholly past position ``k`` are dropped. Expected comparisons: about ``2n`` for a small
``k`` (quickselect plus sorting the top k; exactly ``cost_model/topk_rule.expected_comparisons``,
what the cost model prices), in ``O(log n)`` rounds. Ranked on demand
(``IncrementalRanking``, ``Ranks``), the first ``r`` ranks cost about ``2n + 2r ln r``.

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
    ranking = IncrementalRanking(items, k, better)
    return ranking.top(k), ranking.asked


class IncrementalRanking:
    """A partial quicksort that ranks on demand: ``top(r)`` refines only the segments that overlap
    the first ``r`` positions (never past ``k``), so asking for more ranks later continues the same
    partitions instead of starting again. ``top(k)`` at once is `partial_quicksort`; any sequence
    of ``top`` calls asks the same comparisons for the ranks it reaches (pivots depend on a
    segment's items only), so the first ``r`` ranks are those the whole ranking gives.

    >>> ranking = IncrementalRanking(list(range(40)), 10, lambda pairs: [a > b for a, b in pairs])
    >>> ranking.top(2), ranking.asked < partial_quicksort(list(range(40)), 10, lambda p: [a > b for a, b in p])[1]
    ([39, 38], True)
    >>> ranking.top(4)
    [39, 38, 37, 36]
    """

    def __init__(self, items: list[Any], k: int, better: Better) -> None:
        self.segments: list[list[Any]] = [list(items)] if items else []
        self.k = k
        self.better = better
        self.asked = 0

    def top(self, upto: int) -> list[Any]:
        """The best ``min(upto, k)`` items, best first."""
        upto = min(upto, self.k)
        while True:
            self.segments = _cut(self.segments, self.k)
            work: list[tuple[int, Any, list[Any]]] = []
            position = 0
            for index, segment in enumerate(self.segments):
                if position >= upto:
                    break
                if len(segment) > 1:
                    chosen = _pivot(segment)
                    work.append((index, segment[chosen], segment[:chosen] + segment[chosen + 1 :]))
                position += len(segment)
            if not work:
                break
            pairs = [(item, pivot) for _, pivot, others in work for item in others]
            answers = iter(self.better(pairs))
            self.asked += len(pairs)
            replaced: dict[int, list[list[Any]]] = {}
            for index, pivot, others in work:
                verdicts = [next(answers) for _ in others]
                above = [item for item, wins in zip(others, verdicts, strict=True) if wins]
                below = [item for item, wins in zip(others, verdicts, strict=True) if not wins]
                replaced[index] = [part for part in (above, [pivot], below) if part]
            self.segments = [
                part for index, segment in enumerate(self.segments) for part in replaced.get(index, [segment])
            ]
        return [segment[0] for segment in self.segments[:upto]]


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
    ranks = Ranks(table, stage, tiers, ledger)
    top = ranks.next(stage.k)
    return RankOutcome(top, ranks.asked, ranks.candidates)


class Ranks:
    """The rows of ``table`` (with vectors) in rank order, ranked on demand: each ``next(n)`` gives
    the next ``n`` ranks (fewer at ``stage.k``) with their rank in ``stage.output``, asking only the
    comparisons those ranks need (``IncrementalRanking``). A LIMIT over a chain above a top-k draws
    ranks this way (``pipeline/ray/limit_rounds.py``), so ranks nobody reads are never sorted."""

    def __init__(self, table: pa.Table, stage: TopKStage, tiers: TierHandles, ledger: BatchLedger | None) -> None:
        self.stage = stage
        self.columns = [name for name, _ in stage.input_columns if name != VECTOR]
        self.table = table
        self.given = 0
        self.candidates = 0
        if table.num_rows == 0:
            self.ranking = IncrementalRanking([], stage.k, lambda pairs: [])
            return
        vectors = np.asarray(table.column(VECTOR).to_pylist(), dtype=np.float32)
        query = journaled_embedding(stage.criterion, stage.operator_key, CRITERION_BATCH, tiers, ledger)
        similarity = vectors @ query
        self.candidates = min(stage.prefilter, table.num_rows)
        candidates = sorted(np.argsort(-similarity, kind="stable")[: self.candidates].tolist())
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

        self.ranking = IncrementalRanking(candidates, stage.k, better)

    @property
    def asked(self) -> int:
        return self.ranking.asked

    def next(self, rows: int) -> pa.Table:
        """The next ``rows`` ranks (none once ``stage.k`` were given or the candidates ran out)."""
        order = self.ranking.top(self.given + rows)[self.given :]
        first = self.given + 1
        self.given += len(order)
        top = self.table.select(self.columns).take(pa.array(order, pa.int64()))
        return top.append_column(self.stage.output, pa.array(range(first, first + len(order)), pa.int64()))
