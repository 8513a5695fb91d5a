"""Keep a cascade only when it is projected to be no slower than the large tier alone.

A cascade saves dollars, but before its first routed call it embeds every row and waits for the
large tier's calibration labels (`semray.cost_model.cascade_wall`). Where the large tier answers
fast next to the embedding tier (a self-hosted model on a GPU, a simulated tier with no latency)
the cascade is slower in wall time than asking the large tier about every row. So, after the
optimizer, each cascade the planner may still decide on is priced both ways, and one whose
projected wall time exceeds the large tier's alone times ``max_slowdown``
(``Settings.cascade_max_slowdown``, default 1.0: never slower) runs on the large tier instead:
``tier="large"``, its target dropped (the large tier meets any target against itself, at the large
tier's price). ``cascade_max_slowdown=inf`` keeps every cascade (dollars first, whatever the wall time).

Which cascades are checked: those asked for with ``tier="auto"`` and a ``quality`` target, and those
model selection chose (``tier="cascade"`` in the optimized plan). A cascade the user wrote with
``tier="cascade"`` is pinned, as ``tier="small"`` is, and kept. A cascade under a LIMIT is left as
it is: it runs in the LIMIT's round trips, calibrating on the first (or on the large tier row by row,
`limit_chain`), which this projection does not describe.

The projection reads the sources' stated row counts, the statistics given, and prompt tokens counted
on each cascade source's first rows where none were measured (`semray.cost_model.head_tokens`); it is
deterministic for the same plan, tiers and sources, so a resumed run makes the same choice (the
journal keys follow the chosen plan, as they follow model selection's).

>>> choice = choose_cascades_by_wall_time(plan, profiles)  # doctest: +SKIP
>>> print(choice.explain())  # doctest: +SKIP
SemClassify [cascade accuracy>=0.9 delta=0.05] 'the diagnosis ...': large tier, not a cascade: projected
wall time: cascade 20.1 s (...) · large tier alone 5.0 s; 4.02x slower, above cascade_max_slowdown 1
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from semray.cost_model.cardinality import source_statistics
from semray.cost_model.cascade_wall import CascadeWall
from semray.cost_model.estimates import EstimateError
from semray.cost_model.head_tokens import head_token_statistics
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.statistics import PlanStatistics
from semray.log import get_logger
from semray.operators.base import Node, walk
from semray.operators.keys import statistics_key
from semray.operators.plan_paths import operator_paths, rewrite_at_paths
from semray.operators.relational import Limit
from semray.operators.semantic import Semantic
from semray.planner.capabilities import rebuild

log = get_logger(__name__)

LARGE = "large"


@dataclass(frozen=True, slots=True)
class CascadeChoice:
    """One cascade's verdict: kept, or run on the large tier, and the two projected wall times."""

    path: str
    label: str
    kept: bool
    wall: CascadeWall
    max_slowdown: float

    def explain(self) -> str:
        verdict = "cascade kept" if self.kept else "large tier, not a cascade"
        if self.kept:
            why = f"{self.wall.slowdown:.2f}x the large tier's time, within cascade_max_slowdown {self.max_slowdown:g}"
        else:
            why = f"{self.wall.slowdown:.2f}x slower, above cascade_max_slowdown {self.max_slowdown:g}"
        return f"{self.label}: {verdict}: {self.wall.describe()}; {why}"


@dataclass(frozen=True, slots=True)
class WallChoice:
    """The plan with the cascades projected too slow on the large tier, and each verdict."""

    plan: Node
    choices: tuple[CascadeChoice, ...] = ()

    def explain(self) -> str:
        """EXPLAIN's section: one line per cascade checked; empty when none was."""
        if not self.choices:
            return ""
        lines = "\n".join(choice.explain() for choice in self.choices)
        return f"\n\nCascade or large tier by projected wall time (Settings.cascade_max_slowdown)\n{lines}"


def pinned_cascades(plan: Node) -> frozenset[str]:
    """Statistics keys of the operators ``plan`` (as the user wrote it) pins to ``tier="cascade"``."""
    return frozenset(
        statistics_key(node) for node in walk(plan) if isinstance(node, Semantic) and node.tier == "cascade"
    )


def choose_cascades_by_wall_time(
    plan: Node,
    profiles: Mapping[str, Any],
    statistics: PlanStatistics | None = None,
    max_slowdown: float = 1.0,
    pinned: Collection[str] = frozenset(),
) -> WallChoice:
    """``plan`` with each checked cascade (see the module docstring) whose projected wall time
    exceeds ``max_slowdown`` times the large tier's alone moved to the large tier; ``pinned`` are
    statistics keys of cascades the user pinned (`pinned_cascades` of the written plan)."""
    nodes = operator_paths(plan)
    limits = [path for path, node in nodes.items() if isinstance(node, Limit)]
    candidates = {
        path: node
        for path, node in nodes.items()
        if isinstance(node, Semantic)
        and node.cascades() is not None
        and statistics_key(node) not in pinned
        and not any(_below(path, limit) for limit in limits)
    }
    if not candidates or "embedding" not in profiles or LARGE not in profiles:
        return WallChoice(plan)
    known = source_statistics(plan).merged(statistics) if statistics is not None else source_statistics(plan)
    known = head_token_statistics(list(candidates.values()), known).merged(known)
    try:
        estimate = estimate_plan(plan, known, profiles)
    except EstimateError as error:  # a plan the cost model cannot price keeps its cascades, as written
        log.warning("cascade_wall_choice_unpriced", error=str(error))
        return WallChoice(plan)
    choices: list[CascadeChoice] = []
    for path, node in candidates.items():
        wall = getattr(estimate.operator(path), "wall", None)
        if wall is None:
            continue
        kept = wall.slowdown <= max_slowdown
        choices.append(CascadeChoice(path, node.label(), kept, wall, max_slowdown))
        log.info(
            "cascade_wall_choice",
            operator=node.label(),
            kept=kept,
            cascade_s=round(wall.cascade.value, 1),
            large_alone_s=round(wall.large_alone.value, 1),
            max_slowdown=max_slowdown,
        )
    slow: dict[str, Callable[[Node], Node]] = {choice.path: _on_large for choice in choices if not choice.kept}
    return WallChoice(rewrite_at_paths(plan, slow) if slow else plan, tuple(choices))


def _below(path: str, ancestor: str) -> bool:
    return path != ancestor and (ancestor == "" or path.startswith(ancestor + "."))


def _on_large(node: Node) -> Node:
    return rebuild(node, tier=LARGE, quality=None)
