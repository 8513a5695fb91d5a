"""A cascade under a LIMIT, one round of rows at a time on the driver (``GrowingLimitStage``).

It calibrates on the first round and routes the later ones row by row, so the small and large
tiers see little more than the rows the LIMIT needs (``CascadeRounds``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from semray.cost_model import cascade_routes as router
from semray.operators.schema import ROW_ID
from semray.pipeline.stages.semantic import CascadeStage
from semray.pipeline.workers.cascade_calibration import calibrate, calibration_seed, cascade_target
from semray.pipeline.workers.cascade_tiers import (
    EMBEDDING_SUFFIX,
    PROXY,
    PROXY_LABEL,
    FinalUDF,
    ProxyUDF,
    SmallUDF,
    on_tier,
    small_decides,
)
from semray.pipeline.workers.row_counts import RowCounts, count_rows
from semray.pipeline.workers.semantic_batches import SemanticBatchUDF
from semray.serving.deployments import TierHandles
from semray.tasks import TaskKind
from semray.transactions import BatchLedger


class CascadeRounds:
    """A cascade under a LIMIT, one round of rows at a time on the driver (`workers/limit_rounds.limited_rows`).

    The first round's rows (about ``LIMIT / selectivity``) are the population it calibrates on:
    their proxies, an importance-weighted draw of ``labels`` of them that the large tier labels, the
    small tier on the drawn rows the embedding tier leaves (`cascade_calibration.calibrate`). Then
    that round and every later one is routed row by row with the thresholds found: the embedding
    tier first, the small tier for the rest (not asked at all when its threshold decides nothing),
    the large tier for what neither decides. Where the thresholds decide no row below the large
    tier, the first round that has at least doubled the rows seen calibrates again over all of them
    with twice the draws (the large tier's answers for rows it already decided are reused from the
    journal). What the cascade promises then holds for the rows it calibrated on, and for the later
    ones as far as they resemble them (docs/cascade.md).

    >>> step = CascadeRounds(stage, tiers, ledger)  # doctest: +SKIP
    >>> limited_rows(batches, [step], wanted=150, first_rows=300)  # doctest: +SKIP
    """

    def __init__(
        self,
        stage: CascadeStage,
        tiers: TierHandles,
        ledger: BatchLedger | None,
        *,
        row_counts: RowCounts | None = None,
        counted_as: tuple[str, ...] = (),
    ) -> None:
        task = stage.task
        self.stage = stage
        self.ledger = ledger
        self.target = cascade_target(stage)
        instruction = tiers.embed([router.instruction_text(task.instruction)])[0]
        labels = tiers.embed(list(task.choices)) if task.kind == TaskKind.CLASSIFY else None
        self.proxy = ProxyUDF(
            task, tiers, instruction, labels, operator_key=stage.operator_key + EMBEDDING_SUFFIX, ledger=ledger
        )
        self.large = SemanticBatchUDF(on_tier(task, "large"), stage.operator_key, tiers, ledger)
        self.small = SemanticBatchUDF(on_tier(task, "small"), stage.operator_key + ":small", tiers, ledger)
        self.row_counts = row_counts
        self.counted_as = counted_as
        self.seen: list[pa.Table] = []
        """Every round's rows with their proxies: the population of a new calibration."""
        self.route: router.Route | None = None
        self.calibrations = 0
        self.calibrated_rows = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        proxied = self.proxy(batch)
        self.seen.append(proxied)
        seen = sum(table.num_rows for table in self.seen)
        sample: frozenset[str] = frozenset()
        if self.route is None or (not decides_below_large(self.route) and seen >= 2 * self.calibrated_rows):
            sample = self._calibrate(proxied, seen)
        assert self.route is not None
        with_small = SmallUDF(self.small, self.route, sample)(proxied) if small_decides(self.route) else proxied
        output = FinalUDF(self.large, self.route, sample)(with_small)
        if self.row_counts is not None and self.counted_as:
            count_rows(output, self.row_counts, self.counted_as)
        return output

    def _calibrate(self, proxied: pa.Table, seen: int) -> frozenset[str]:
        """Calibrate over every row seen (the route is then ``self.route``); which of this round's
        rows were drawn (the large tier answered those)."""
        population = pa.concat_tables(self.seen, promote_options="default").sort_by(ROW_ID)
        ids = [str(value) for value in population.column(ROW_ID).to_pylist()]
        proxy = population.column(PROXY).to_numpy().astype(np.float64)
        proxy_label = population.column(PROXY_LABEL).to_numpy().astype(np.int64)
        target = dataclasses.replace(self.target, labels=self.target.labels * 2**self.calibrations)

        def rows_of(row_ids: list[str]) -> pa.Table:
            return population.filter(pc.is_in(population.column(ROW_ID), pa.array(row_ids, pa.string())))

        seed = calibration_seed(self.stage) + self.calibrations
        calibration = calibrate(
            self.stage,
            target,
            self.large,
            self.small,
            ids,
            proxy,
            proxy_label,
            rows_of,
            seed,
            self.ledger,
            at_once=False,
        )
        self.route, self.calibrations, self.calibrated_rows = calibration.route, self.calibrations + 1, seen
        return frozenset(calibration.sample) & frozenset(str(value) for value in proxied.column(ROW_ID).to_pylist())


def decides_below_large(route: router.Route) -> bool:
    """Whether the route's thresholds let the embedding or the small tier decide any row."""
    embedding = (route.embed_low, route.embed_high, route.embed_confidence)
    small = route.small_confidence if route.uses_small else math.inf
    return any(math.isfinite(value) for value in embedding) or math.isfinite(small)
