"""SemCode's per-actor batch function: a ``CodeStage`` runs on an actor pool; each actor holds one
``SandboxWorker`` (a long-lived child process fed batches over a pipe) and appends the function's
columns to each batch. No model is called: execution costs CPU only.
"""

from __future__ import annotations

import pyarrow as pa

from semray.pipeline.stages.code import CodeStage
from semray.sandbox import SandboxWorker
from semray.sandbox.worker import ARROW_TYPES


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
