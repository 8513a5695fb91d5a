"""Actor-pool UDF that embeds rows with the embedding tier (one round trip per batch).

A journaled embedding (``EmbedStage.journaled``: a run-scoped SemSearch's rows, which the cost model
prices as one embedding call per row, a blocked SemJoin's two sides, a SemTopK's prefilter) commits
each batch's vectors to the run's ledger under the stage's operator key with what it paid: one call
per text embedded, the texts' tokens, priced by ``TierHandles.embedding_dollars``. ``Result.usage``
then counts them, and a resumed run reads the committed vectors back by row id instead of embedding
those rows again. A text no row owns (a search's query, a top-k's criterion) is journaled the same
way as a batch of its own (``journaled_embedding``).

>>> udf = EmbedBatchUDF("{text}", tiers)  # doctest: +SKIP
>>> udf(pa.table({"text": ["a"]})).column("_vec").type  # doctest: +SKIP
ListType(list<item: float>)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from semray.pipeline.stages.set_ops import VECTOR
from semray.serving.handles import TierHandles
from semray.serving.prompts.render import render_prompt
from semray.serving.simulator.tokens import TokenCounter
from semray.transactions import BatchLedger, LLMUsage, batch_key
from semray.transactions.batches import ROW_ID  # operators.schema's, without the plan layer in every actor

VECTOR_TYPE = pa.list_(pa.float32())


class EmbedBatchUDF:
    """Callable class for ``map_batches(compute=ActorPoolStrategy(...))``: adds ``VECTOR``.

    With ``operator_key`` and the run's ``ledger`` each batch is journaled (module doc); without, it is
    embedded uncounted.
    """

    def __init__(
        self, template: str, tiers: TierHandles, operator_key: str | None = None, ledger: BatchLedger | None = None
    ) -> None:
        self.template = template
        self.tiers = tiers
        self.operator_key = operator_key
        self.ledger = ledger
        self._tokens: TokenCounter | None = None

    def __call__(self, batch: pa.Table) -> pa.Table:
        if batch.num_rows == 0:
            return batch.append_column(VECTOR, pa.array([], VECTOR_TYPE))
        texts = [render_prompt(self.template, row, allow_non_string=True).text for row in batch.to_pylist()]
        if self.ledger is None or self.operator_key is None or ROW_ID not in batch.column_names:
            return batch.append_column(VECTOR, pa.array(self.tiers.embed(texts).tolist(), VECTOR_TYPE))
        ids = [str(value) for value in batch.column(ROW_ID).to_pylist()]
        vectors = self._committed(ids)
        todo = [position for position, row_id in enumerate(ids) if row_id not in vectors]
        if todo:
            vectors.update(self._embed([ids[position] for position in todo], [texts[position] for position in todo]))
        return batch.append_column(VECTOR, pa.array([vectors[row_id] for row_id in ids], VECTOR_TYPE))

    def _committed(self, ids: list[str]) -> dict[str, list[float]]:
        """Row id -> vector of the rows of this batch a run (an earlier attempt) already embedded."""
        assert self.ledger is not None and self.operator_key is not None
        found = self.ledger.lookup_rows(self.operator_key, ids)
        if found.table is None or not found.table.num_rows:
            return {}
        keys = [str(value) for value in found.table.column(ROW_ID).to_pylist()]
        return dict(zip(keys, found.table.column(VECTOR).to_pylist(), strict=True))

    def _embed(self, ids: list[str], texts: list[str]) -> dict[str, list[float]]:
        """Embed ``texts`` in one call and commit them under their row ids with what they paid."""
        assert self.ledger is not None and self.operator_key is not None
        self.ledger.raise_if_fenced()  # an orphaned actor of a killed driver stops before paying
        vectors = self.tiers.embed(texts).tolist()
        if self._tokens is None:
            self._tokens = TokenCounter()
        tokens = sum(max(self._tokens.count(text), 1) for text in texts)
        usage = LLMUsage(calls=len(texts), tokens_in=tokens, dollars=self.tiers.embedding_dollars(tokens))
        unique = dict(zip(ids, vectors, strict=True))
        table = pa.table(
            {ROW_ID: pa.array(list(unique), pa.string()), VECTOR: pa.array(list(unique.values()), VECTOR_TYPE)}
        )
        self.ledger.commit(self.operator_key, batch_key(self.operator_key, list(unique)), list(unique), table, usage)
        return unique


def journaled_embedding(
    text: str, operator_key: str, batch_id: str, tiers: TierHandles, ledger: BatchLedger | None
) -> np.ndarray:
    """The vector of one text that no input row owns (a search's query, a top-k's criterion),
    embedded once per run and counted in its usage.

    The call is committed to the run's ledger under ``operator_key`` as the batch ``batch_id`` (one
    call, the text's tokens, priced by ``TierHandles.embedding_dollars``; no rows), with the vector,
    so ``Result.usage`` counts it and a resume reads the vector back instead of paying again.
    Without a ledger it is embedded, uncounted.
    """
    key = batch_key(operator_key, [batch_id])
    known = ledger.lookup(operator_key, key) if ledger is not None else None
    if known is not None and known.num_rows:
        return np.asarray(known.column(VECTOR)[0].as_py(), dtype=np.float32)
    if ledger is not None:
        ledger.raise_if_fenced()  # a worker of an older attempt stops before paying
    vector = np.asarray(tiers.embed([text])[0], dtype=np.float32)
    if ledger is not None:
        tokens = max(TokenCounter().count(text), 1)
        usage = LLMUsage(calls=1, tokens_in=tokens, dollars=tiers.embedding_dollars(tokens))
        vectors = pa.table({VECTOR: pa.array([vector.tolist()], VECTOR_TYPE)})
        ledger.commit(operator_key, key, (), vectors, usage, rows_out=0)
    return vector
