"""The key of an operator where it sits in a plan: the same operator over the same input, the same key.

Lowering tags each stage with the keys of the operators it computes, the run journal commits a
semantic operator's batches under its key (so a resume reuses them only for that operator over
that input), and EXPLAIN reads the rows each operator passed on by it. What an operator asks,
wherever it sits, is its ``cost_model.statistics.statistics_key`` instead.
"""

from __future__ import annotations

import hashlib

from semray.operators.base import Node


def operator_key(node: Node) -> str:
    """Identifies an operator and its whole input, so committed rows are reused only for it."""
    return hashlib.sha256(node.model_dump_json().encode()).hexdigest()[:24]
