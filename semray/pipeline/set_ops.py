"""Ray Data builders of the set-level semantic stages."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from semray.pipeline.spec import Stage

if TYPE_CHECKING:
    import ray.data as rd

    from semray.pipeline.materialize import ExecutionContext

SET_BUILDERS: dict[type[Stage], Callable[[Stage, "ExecutionContext"], "rd.Dataset"]] = {}
