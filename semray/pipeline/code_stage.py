"""SemCode's execution: a physical stage, its lowering, and the per-actor batch function.

A ``CodeStage`` runs on an actor pool; each actor holds one ``SandboxWorker`` (a long-lived
child process fed batches over a pipe) and appends the function's columns to each batch. No
model is called: execution costs CPU only. The code's hash is in the stage, so a resume's
physical plan matches only when it runs the same code.
"""

from __future__ import annotations

import pyarrow as pa

from semray.errors import LoweringError
from semray.operators.base import Node
from semray.operators.code import SemCode
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.code import CodeStage
from semray.sandbox import Limits, SandboxWorker
from semray.sandbox.worker import ARROW_TYPES
from semray.settings import Settings

CODE_BATCH_ROWS = 1024
"""Rows per sandbox call: one pipe round trip per batch, cheap next to the function's work."""


def lower_code(node: Node, settings: Settings) -> Stage:
    from semray.pipeline.lower import lower

    assert isinstance(node, SemCode)
    if node.code is None or node.code_sha256 is None:
        raise LoweringError(
            f"SemCode {node.instruction!r} has no code yet; run the query (the large tier writes the function "
            "at plan time), call Query.with_code(), or supply code=..."
        )
    limits = Limits(node.limits.cpu_s, node.limits.memory_mb, node.limits.wall_s)
    return CodeStage(
        code=node.code,
        code_sha256=node.code_sha256,
        columns=node.inputs,
        outputs=node.output_types(),
        limits=limits,
        batch_rows=min(CODE_BATCH_ROWS, max(settings.batch_size, 1)),
        actors=max(1, settings.semantic_actors),
        instruction=node.instruction,
        inputs=(lower(node.input, settings),),
    )


class CodeBatchUDF:
    """A Ray Data actor's callable: the batch with the function's columns appended."""

    def __init__(self, stage: CodeStage) -> None:
        self._worker = SandboxWorker(stage.code, stage.columns, stage.outputs, stage.limits)
        self._outputs = stage.outputs

    def __call__(self, batch: pa.Table) -> pa.Table:
        if batch.num_rows == 0:
            produced = pa.table({name: pa.array([], ARROW_TYPES[kind]) for name, kind in self._outputs})
        else:
            produced = self._worker.run(batch)
        result = batch
        for name, _ in self._outputs:
            result = result.append_column(name, produced[name])
        return result

    def __del__(self) -> None:
        worker = getattr(self, "_worker", None)
        if worker is not None:
            worker.close()
