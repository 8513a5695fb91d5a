"""Actor-pool UDF that embeds rows with the embedding tier (one round trip per batch).

>>> udf = EmbedBatchUDF("{text}", tiers)  # doctest: +SKIP
>>> udf(pa.table({"text": ["a"]})).column("_vec").type  # doctest: +SKIP
ListType(list<item: float>)
"""

from __future__ import annotations

import pyarrow as pa

from semray.pipeline.stages.set_ops import VECTOR
from semray.serving.deployments import TierHandles
from semray.serving.prompts.render import render_prompt

VECTOR_TYPE = pa.list_(pa.float32())


class EmbedBatchUDF:
    """Callable class for ``map_batches(compute=ActorPoolStrategy(...))``: adds ``VECTOR``."""

    def __init__(self, template: str, tiers: TierHandles) -> None:
        self.template = template
        self.tiers = tiers

    def __call__(self, batch: pa.Table) -> pa.Table:
        if batch.num_rows == 0:
            return batch.append_column(VECTOR, pa.array([], VECTOR_TYPE))
        texts = [render_prompt(self.template, row, allow_non_string=True).text for row in batch.to_pylist()]
        vectors = self.tiers.embed(texts)
        return batch.append_column(VECTOR, pa.array(vectors.tolist(), VECTOR_TYPE))
