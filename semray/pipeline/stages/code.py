"""The physical stage of SemCode: a committed function run over each batch in a sandboxed process.

No model is called: execution costs CPU only. The code's hash is in the stage, so a resume's
physical plan matches only when it runs the same code (``pipeline/workers/code_batches.py`` runs it).
"""

from __future__ import annotations

from dataclasses import dataclass

from semray.pipeline.stages.base import Stage
from semray.sandbox import Limits


@dataclass(frozen=True, slots=True)
class CodeStage(Stage):
    """Run a committed function over each batch in a sandboxed process per actor."""

    code: str
    code_sha256: str
    columns: tuple[str, ...]
    """The input columns the function receives."""
    outputs: tuple[tuple[str, str], ...]
    limits: Limits
    batch_rows: int
    actors: int
    instruction: str = ""

    def describe(self) -> str:
        outputs = ", ".join(f"{name}: {kind}" for name, kind in self.outputs)
        return (
            f"Code[sha256:{self.code_sha256[:12]}, sandboxed, CPU only] {self.instruction!r} -> {outputs} "
            f"(actor pool of {self.actors}, batches of {self.batch_rows}; limits {self.limits.cpu_s:g} CPU-s, "
            f"{self.limits.memory_mb} MB, {self.limits.wall_s:g} s per batch)"
        )
