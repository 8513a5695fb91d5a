"""Lowering of the set-level semantic operators (SemJoin, SemTopK, SemAgg, SemSearch)."""

from __future__ import annotations

from collections.abc import Callable

from semray.operators.base import Node
from semray.pipeline.spec import Stage
from semray.settings import Settings

SET_LOWERINGS: dict[type[Node], Callable[[Node, Settings], Stage]] = {}
