"""Which Ray node this process runs on, without importing Ray where it is not loaded.

>>> current_node_id() is None  # outside Ray
True
"""

from __future__ import annotations

import sys


def current_node_id() -> str | None:
    """The hex id of this process's Ray node; None when this process is not connected to Ray."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    node: str = ray.get_runtime_context().get_node_id()
    return node
