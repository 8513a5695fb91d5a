"""The per-batch steps of a cascade, one per tier (``CascadeStage``; docs/cascade.md).

``ProxyUDF`` adds each row's embedding proxy (a filter's similarity to the instruction, or the
nearest label and its confidence); ``SmallUDF`` asks the small tier about the rows the embedding
tier does not decide (drawn rows aside: the large tier answered those to calibrate); ``FinalUDF``
gives each row the answer of the tier the route says decides it and asks the large tier for the
rest. The route may still be coming (``RouteToCome``): over a whole input the small tier's
threshold is chosen while the rows already stream through the small tier, and only ``FinalUDF``
waits for it. ``pipeline/ray/cascade.py`` runs them on actor pools over a whole input,
``cascade_rounds.CascadeRounds`` on the driver one round of rows at a time.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from semray.cost_model import cascade_routes as router
from semray.operators.schema import ROW_ID
from semray.operators.templates import template_columns
from semray.pipeline.stages.semantic import SemanticTask
from semray.pipeline.workers.semantic_batches import CONFIDENCE, ERROR, KEEP, TIER, SemanticBatchUDF
from semray.serving.deployments import TierHandles
from semray.serving.simulator.tokens import TokenCounter
from semray.tasks import TaskKind
from semray.transactions import BatchLedger, LLMUsage, batch_key

PROXY = "__proxy"
PROXY_LABEL = "__proxy_label"
SMALL_PREFIX = "__small."
SMALL_CONFIDENCE = SMALL_PREFIX + CONFIDENCE
SMALL_KEY = "__small_key"


class RouteToCome(Protocol):
    """A route and its calibration sample still being chosen elsewhere (a Ray task:
    ``pipeline/ray/cascade.RouteRef``); ``resolve`` waits for them. Picklable, so the routing actors
    get it with their constructor arguments (and start while it is chosen) and wait at their first
    batch."""

    def resolve(self) -> tuple[router.Route, frozenset[str]]: ...


def small_decides(route: router.Route) -> bool:
    """Whether the route asks the small tier at all: it has a small stage whose threshold decides rows."""
    return route.uses_small and math.isfinite(route.small_confidence)


def on_tier(task: SemanticTask, tier: str) -> SemanticTask:
    """``task`` asked of ``tier``."""
    return dataclasses.replace(task, tier=tier)


def answer_keys(answers: pa.Table, task: SemanticTask) -> list[str | None]:
    """Comparable text of each answer (None for a failed row): "true"/"false", a label, a score."""
    errors = answers.column(ERROR).to_pylist()
    if task.kind == TaskKind.FILTER:
        values: list[Any] = answers.column(KEEP).to_pylist()
        texts = [None if value is None else ("true" if value else "false") for value in values]
    else:
        ((name, _),) = task.outputs
        texts = [None if value is None else str(value) for value in answers.column(name).to_pylist()]
    return [None if error is not None else text for text, error in zip(texts, errors, strict=True)]


EMBEDDING_SUFFIX = ":embedding"
"""The proxies' operator key is the cascade's plus this (``<key>:embedding``, beside ``<key>:small``)."""


class ProxyUDF:
    """Adds the embedding proxy of each row: a filter's score, or a label index and its confidence.

    With ``operator_key`` (the cascade's ``<key>:embedding``) and the run's ``ledger``, each batch's
    proxies are journaled with what the embedding paid: one call per text embedded, the texts'
    tokens, priced by ``TierHandles.embedding_dollars`` (as a run-scoped SemSearch's rows are,
    ``embed_batches.py``). ``Result.usage`` then counts them, and a resumed run reads the proxies
    back by row id instead of embedding those rows again.
    """

    def __init__(
        self,
        task: SemanticTask,
        tiers: TierHandles,
        instruction: np.ndarray,
        labels: np.ndarray | None,
        *,
        operator_key: str | None = None,
        ledger: BatchLedger | None = None,
    ) -> None:
        self.task = task
        self.tiers = tiers
        self.instruction = instruction
        self.labels = labels
        self.columns = template_columns(task.instruction, "cascade")
        self.operator_key = operator_key
        self.ledger = ledger
        self._tokens: TokenCounter | None = None

    def __call__(self, batch: pa.Table) -> pa.Table:
        n = batch.num_rows
        if n == 0 or self.task.kind == TaskKind.SCORE:
            return batch.append_column(PROXY, pa.array(np.zeros(n))).append_column(
                PROXY_LABEL, pa.array(np.full(n, -1))
            )
        rows = batch.select(list(self.columns)).to_pylist()
        texts = [" ".join("" if row[column] is None else str(row[column]) for column in self.columns) for row in rows]
        if self.ledger is None or self.operator_key is None or ROW_ID not in batch.column_names:
            confidence, label = self._proxies(texts)
        else:
            confidence, label = self._journaled(batch, texts)
        return batch.append_column(PROXY, pa.array(confidence, pa.float64())).append_column(
            PROXY_LABEL, pa.array(label, pa.int64())
        )

    def _proxies(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(confidence or score, label index or -1) of each text, embedded in one call."""
        vectors = self.tiers.embed(texts)
        if self.labels is not None:
            label, confidence = router.classify_proxy(vectors, self.labels)
            return confidence, label
        return router.filter_proxy(vectors, self.instruction), np.full(len(texts), -1)

    def _journaled(self, batch: pa.Table, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """`_proxies`, reusing the rows committed before and committing the others with their usage."""
        assert self.ledger is not None and self.operator_key is not None
        ids = [str(value) for value in batch.column(ROW_ID).to_pylist()]
        known: dict[str, tuple[float, int]] = {}
        found = self.ledger.lookup_rows(self.operator_key, ids)
        if found.table is not None:
            known = {
                str(row_id): (float(score), int(index))
                for row_id, score, index in zip(
                    found.table.column(ROW_ID).to_pylist(),
                    found.table.column(PROXY).to_pylist(),
                    found.table.column(PROXY_LABEL).to_pylist(),
                    strict=True,
                )
            }
        todo = [position for position, row_id in enumerate(ids) if row_id not in known]
        if todo:
            self.ledger.raise_if_fenced()  # an orphaned actor of a killed driver stops before paying
            asked = [texts[position] for position in todo]
            confidence, label = self._proxies(asked)
            new = {ids[p]: (float(c), int(x)) for p, c, x in zip(todo, confidence, label, strict=True)}
            if self._tokens is None:
                self._tokens = TokenCounter()
            tokens = sum(max(self._tokens.count(text), 1) for text in asked)
            usage = LLMUsage(calls=len(asked), tokens_in=tokens, dollars=self.tiers.embedding_dollars(tokens))
            table = pa.table(
                {
                    ROW_ID: pa.array(list(new), pa.string()),
                    PROXY: pa.array([value[0] for value in new.values()], pa.float64()),
                    PROXY_LABEL: pa.array([value[1] for value in new.values()], pa.int64()),
                }
            )
            self.ledger.commit(self.operator_key, batch_key(self.operator_key, list(new)), list(new), table, usage)
            known.update(new)
        return (
            np.array([known[row_id][0] for row_id in ids], dtype=np.float64),
            np.array([known[row_id][1] for row_id in ids], dtype=np.int64),
        )


class SmallUDF:
    """Asks the small tier about the rows the embedding tier does not decide; adds its answers.

    Drawn rows (``sample``) are not asked: they take the large tier's answer, bought to calibrate.
    ``route`` needs only its embedding thresholds (the small tier's is chosen from the draws, and
    may still be coming when this runs). Over a whole input it runs while the calibration is still
    labelling the draws, with a route that has no embedding thresholds yet: it asks every row not
    drawn (the rows the embedding tier will decide too: the small tier's answers for those are
    bought in vain, cheap next to waiting for the route).
    """

    def __init__(self, small: SemanticBatchUDF, route: router.Route, sample: frozenset[str] = frozenset()) -> None:
        self.small = small
        self.route = route
        self.sample = sample

    def __call__(self, batch: pa.Table) -> pa.Table:
        proxy = batch.column(PROXY).to_numpy()
        asked = ~self.route.embedding_decides(proxy)
        if self.sample:
            asked &= ~np.array([row_id in self.sample for row_id in batch.column(ROW_ID).to_pylist()], dtype=bool)
        schema = self.small.answers_schema()
        answers = self.small.answers(user_columns(batch).filter(pa.array(asked)))
        position = {row_id: index for index, row_id in enumerate(answers.column(ROW_ID).to_pylist())}
        order = pa.array([position.get(row_id) for row_id in batch.column(ROW_ID).to_pylist()], pa.int64())
        aligned = answers.take(order)  # null index -> null row for rows not asked
        result = batch
        for field in schema:
            if field.name != ROW_ID:
                result = result.append_column(
                    pa.field(SMALL_PREFIX + field.name, field.type), aligned.column(field.name)
                )
        keys = answer_keys(aligned, self.small.task)
        return result.append_column(SMALL_KEY, pa.array(keys, pa.string()))


class FinalUDF:
    """Gives each row the answer of the tier that decides it; asks the large tier for the rest.

    A ``RouteToCome`` (route and sample) is waited for at the first non-empty batch (then kept).
    """

    def __init__(
        self, large: SemanticBatchUDF, route: router.Route | RouteToCome, sample: frozenset[str] = frozenset()
    ) -> None:
        self.large = large
        self.route = route
        self.sample = sample

    def __call__(self, batch: pa.Table) -> pa.Table:
        user = user_columns(batch)
        if batch.num_rows == 0:
            return self.large.apply(user, self.large.answers_schema().empty_table())
        if not isinstance(self.route, router.Route):
            self.route, self.sample = self.route.resolve()
        route = self.route
        proxy = batch.column(PROXY).to_numpy()
        small_confidence = (
            batch.column(SMALL_CONFIDENCE).fill_null(router.NOT_ASKED).to_numpy()
            if SMALL_CONFIDENCE in batch.column_names
            else np.full(batch.num_rows, router.NOT_ASKED)
        )
        decided_by = route.tiers(proxy, small_confidence)
        in_sample = np.array([row_id in self.sample for row_id in batch.column(ROW_ID).to_pylist()])
        decided_by[in_sample] = router.LARGE
        parts = [
            self._embedding(route, batch.filter(pa.array(decided_by == router.EMBEDDING))),
            self._small(batch.filter(pa.array(decided_by == router.SMALL))),
            self.large.answers(user.filter(pa.array(decided_by == router.LARGE))),
        ]
        output = self.large.apply(user, pa.concat_tables(parts))
        self.large.meter.on_tier("cascade").decided(
            {name: int(np.sum(decided_by == code)) for code, name in enumerate(router.TIER_NAMES)}
        )
        return output

    def _embedding(self, route: router.Route, rows: pa.Table) -> pa.Table:
        schema = self.large.answers_schema()
        n = rows.num_rows
        proxy = rows.column(PROXY).to_numpy() if n else np.zeros(0)
        columns: dict[str, Any] = {
            ROW_ID: rows.column(ROW_ID).cast(pa.string()) if n else pa.array([], pa.string()),
            ERROR: pa.nulls(n, pa.string()),
            TIER: pa.array(["embedding"] * n, pa.string()),
            CONFIDENCE: pa.array(proxy, pa.float64()),
        }
        task = self.large.task
        if task.kind == TaskKind.FILTER:
            columns[KEEP] = pa.array(route.embedding_answer(proxy), pa.bool_())
        else:
            ((name, _),) = task.outputs
            labels = rows.column(PROXY_LABEL).to_pylist() if n else []
            columns[name] = pa.array([task.choices[label] for label in labels], pa.string())
        return pa.table(columns).select(schema.names).cast(schema)

    def _small(self, rows: pa.Table) -> pa.Table:
        schema = self.large.answers_schema()
        if rows.num_rows == 0:  # also when the route never asked the small tier (no such columns)
            return schema.empty_table()
        columns = {ROW_ID: rows.column(ROW_ID).cast(pa.string())}
        for field in schema:
            if field.name != ROW_ID:
                columns[field.name] = rows.column(SMALL_PREFIX + field.name)
        return pa.table(columns).select(schema.names).cast(schema)


def user_columns(batch: pa.Table) -> pa.Table:
    """``batch`` without the cascade's own columns (``__proxy``, ``__small.*``, ...)."""
    return batch.select([name for name in batch.column_names if not name.startswith("__")])
