"""Model selection with the cascade rung, through the real cost model: a cascade is chosen where
its shares make it cheap and not where they do not, its target keeps the plan's quality bound,
the chosen plan still validates and lowers, EXPLAIN shows the split, and greedy stays within
10% of exhaustive enumeration over large / cascade / small."""

from __future__ import annotations

import itertools
import math
import random

import pyarrow as pa
import pytest
from planner_reference import memory_scan

from semray.cost_model.estimates import Interval
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.policies import MaxQuality, MinCost
from semray.cost_model.prices import TierProfile
from semray.cost_model.quality import cascade_quality
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Node, Scan, Schema, SemClassify, SemExtract, SemFilter, SemMap, SourceSpec, walk
from semray.operators.keys import source_key, statistics_key
from semray.operators.semantic import QualityTarget
from semray.pipeline.lowering.driver import lower
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.semantic import CascadeStage, SemanticStage
from semray.planner import optimize_plan
from semray.planner.cost_estimator import cost_model_estimator
from semray.planner.explain_estimates import render_estimates
from semray.planner.model_selection import (
    LADDER,
    allocate_cascade_targets,
    cascade_target,
    choosable_paths,
    select_models,
    with_targets,
)
from semray.settings import Settings
from semray.sources.memory_source import register_table

TABLE = pa.table({"note": ["a", "b"], "age": [30, 50]})
NOTES = register_table(TABLE, "cascade-selection-notes")
ROWS = 20_000
PROFILES = {
    "embedding": TierProfile("embedding", 0.0, 0.0, 0.0, math.inf, 8),
    "small": TierProfile("small", 0.15, 0.6, 0.0, math.inf, 8),
    "large": TierProfile("large", 2.5, 10.0, 0.0, math.inf, 8),
}
FAVOURABLE = (Interval(0.3, 0.2, 0.4), Interval(0.5, 0.4, 0.6))
UNFAVOURABLE = (Interval(0.0, 0.0, 0.02), Interval(0.02, 0.0, 0.05))


def plan(pinned: str = "auto") -> Node:
    # A registered table: lowering sizes semantic batches by opening the source.
    scan = Scan(source=SourceSpec(kind="memory", options={"ref": NOTES}), source_schema=Schema.from_arrow(TABLE.schema))
    infection = SemFilter(input=scan, instruction="{note} suggests an infection", tier=pinned)  # type: ignore[arg-type]
    diagnosis = SemClassify(input=infection, instruction="diagnosis of {note}", labels=("flu", "cold", "other"))
    return SemExtract.model_validate(
        {"input": diagnosis, "instruction": "from {note}", "fields": [{"name": "drug"}], "tier": "auto"}
    )


def statistics(node: Node, shares: dict[str, tuple[Interval, Interval]], small: float | None = None) -> PlanStatistics:
    semantic = {n.instruction: n for n in walk(node) if n.calls_llm}  # type: ignore[attr-defined]
    scan = next(n for n in walk(node) if not n.children)
    return PlanStatistics(
        source_rows={source_key(scan): Interval.exact(ROWS)},  # type: ignore[arg-type]
        selectivity={statistics_key(semantic["{note} suggests an infection"]): Interval(0.4, 0.35, 0.45)},
        tokens_per_row={statistics_key(n): Interval.exact(300) for n in semantic.values()},
        cascade_shares={statistics_key(semantic[instruction]): found for instruction, found in shares.items()},
        default_tier_quality={} if small is None else {"small": small},
    )


def tiers_of(node: Node) -> dict[str, str]:
    return {n.instruction: n.tier for n in walk(node) if n.calls_llm}  # type: ignore[attr-defined]


def stages(stage: Stage) -> list[Stage]:
    return [stage, *(child for parent in stage.inputs for child in stages(parent))]


def test_cascades_are_chosen_where_their_shares_make_them_cheap() -> None:
    shares = {"{note} suggests an infection": FAVOURABLE, "diagnosis of {note}": FAVOURABLE}
    result = optimize_plan(plan(), statistics(plan(), shares), PROFILES, MinCost(quality=0.9))
    assert result.estimate is not None and result.selection is not None
    tiers = tiers_of(result.plan)
    assert tiers == {
        "from {note}": "large",
        "diagnosis of {note}": "cascade",
        "{note} suggests an infection": "cascade",
    }
    assert result.estimate.quality >= 0.9
    all_large = estimate_plan(result.reordered, statistics(plan(), shares), PROFILES)
    assert result.estimate.dollars.value < all_large.dollars.value
    for node in walk(result.plan):
        if getattr(node, "tier", None) == "cascade":
            node.check_quality()  # type: ignore[attr-defined]
            assert node.quality is not None and cascade_quality(node.quality.level, node.quality.delta) >= 0.95  # type: ignore[attr-defined]


def test_no_cascade_where_the_large_tier_would_decide_almost_everything() -> None:
    shares = {"{note} suggests an infection": UNFAVOURABLE, "diagnosis of {note}": UNFAVOURABLE}
    result = optimize_plan(plan(), statistics(plan(), shares), PROFILES, MinCost(quality=0.9))
    assert set(tiers_of(result.plan).values()) == {"large"}


def test_no_cascade_without_measured_shares() -> None:
    # Assumed shares cannot say whether the small tier and the proxies decide enough rows.
    favourable = statistics(plan(), {"{note} suggests an infection": FAVOURABLE})
    result = optimize_plan(plan(), favourable, PROFILES, MinCost(quality=0.9))
    tiers = {node.instruction: node.tier for node in walk(result.plan) if hasattr(node, "instruction")}
    assert tiers["{note} suggests an infection"] == "cascade" and tiers["diagnosis of {note}"] != "cascade"


def test_a_lone_cascade_gets_the_whole_quality_budget() -> None:
    shares = {"{note} suggests an infection": UNFAVOURABLE, "diagnosis of {note}": FAVOURABLE}
    result = optimize_plan(plan(), statistics(plan(), shares), PROFILES, MinCost(quality=0.9))
    assert result.selection is not None and result.estimate is not None
    classify = next(n for n in walk(result.plan) if isinstance(n, SemClassify))
    assert classify.tier == "cascade" and classify.quality is not None
    # Allocated 0.05 of the 0.1 budget (two operators could cascade), it gets all of it once the
    # filter stays large: level about 0.918 (cascade_target(0.1), up to rounding).
    assert classify.quality.level <= 0.9185 and cascade_quality(classify.quality.level, classify.quality.delta) >= 0.9
    assert list(result.selection.targets.values()) == [classify.quality]
    assert 0.9 <= result.estimate.quality < 0.9 + 1e-3


def test_small_and_cascade_share_the_budget() -> None:
    # The small tier at 0.97 on every operator: the extraction (no cascade) goes small and the
    # two cascades fit in what is left of the budget.
    shares = {"{note} suggests an infection": FAVOURABLE, "diagnosis of {note}": FAVOURABLE}
    result = optimize_plan(plan(), statistics(plan(), shares, small=0.97), PROFILES, MinCost(quality=0.9))
    assert result.estimate is not None and result.estimate.quality >= 0.9
    assert tiers_of(result.plan)["from {note}"] == "small"


def test_pinned_operators_keep_their_tier() -> None:
    shares = {"{note} suggests an infection": FAVOURABLE, "diagnosis of {note}": FAVOURABLE}
    pinned = plan(pinned="large")
    assert choosable_paths(pinned) == ["", "input"]
    result = optimize_plan(pinned, statistics(pinned, shares), PROFILES, MinCost(quality=0.9))
    assert tiers_of(result.plan)["{note} suggests an infection"] == "large"
    asked = with_targets(plan(), {"input.input": "cascade"}, {"input.input": QualityTarget(level=0.99, delta=0.001)})
    kept = optimize_plan(asked, statistics(asked, shares), PROFILES, MinCost(quality=0.9)).plan
    infection = next(n for n in walk(kept) if isinstance(n, SemFilter))
    assert infection.tier == "cascade" and infection.quality == QualityTarget(level=0.99, delta=0.001)


def test_without_an_embedding_price_there_is_no_cascade_rung() -> None:
    shares = {"{note} suggests an infection": FAVOURABLE, "diagnosis of {note}": FAVOURABLE}
    profiles = {name: profile for name, profile in PROFILES.items() if name != "embedding"}
    result = optimize_plan(plan(), statistics(plan(), shares), profiles, MinCost(quality=0.9))
    assert "cascade" not in tiers_of(result.plan).values()


def test_max_quality_gives_cascades_the_default_target() -> None:
    shares = {"{note} suggests an infection": FAVOURABLE, "diagnosis of {note}": FAVOURABLE}
    estimator = cost_model_estimator(statistics(plan(), shares), PROFILES)
    top = estimator(plan(), None)
    targets = allocate_cascade_targets(plan(), top, MaxQuality(budget_dollars=1.0))
    assert targets == {"input": QualityTarget(), "input.input": QualityTarget()}
    tight = select_models(plan(), estimator, MaxQuality(budget_dollars=top.dollars.value * 0.6))
    assert tight.estimate.dollars.value <= top.dollars.value * 0.6 and "cascade" in tight.tiers.values()


@pytest.mark.parametrize(("budget", "operators"), [(0.1, 1), (0.1, 2), (0.05, 3), (0.2, 6), (0.01, 4)])
def test_allocated_targets_keep_the_union_bound(budget: float, operators: int) -> None:
    target = cascade_target(budget / operators)
    assert target is not None and 0 < target.level < 1
    assert 1 - operators * (1 - cascade_quality(target.level, target.delta)) >= 1 - budget - 1e-12


def test_no_target_below_one_for_a_vanishing_budget() -> None:
    assert cascade_target(0.0) is None and cascade_target(-0.1) is None and cascade_target(1e-4) is None


def test_the_chosen_plan_lowers_to_cascade_stages() -> None:
    shares = {"{note} suggests an infection": FAVOURABLE, "diagnosis of {note}": FAVOURABLE}
    result = optimize_plan(plan(), statistics(plan(), shares), PROFILES, MinCost(quality=0.9))
    physical = stages(lower(result.plan, Settings()))
    cascades = [stage for stage in physical if isinstance(stage, CascadeStage)]
    assert len(cascades) == 2
    classify = next(n for n in walk(result.plan) if isinstance(n, SemClassify))
    assert classify.quality is not None
    assert {(stage.level, stage.delta) for stage in cascades} >= {(classify.quality.level, classify.quality.delta)}
    assert any(isinstance(stage, SemanticStage) and stage.task.tier == "large" for stage in physical)


def test_explain_shows_the_target_and_the_split() -> None:
    shares = {"{note} suggests an infection": FAVOURABLE, "diagnosis of {note}": FAVOURABLE}
    result = optimize_plan(plan(), statistics(plan(), shares), PROFILES, MinCost(quality=0.9))
    assert result.estimate is not None
    text = render_estimates(result.plan, result.estimate)
    lines = [line for line in text.splitlines() if "cascade accuracy >=" in line]
    assert len(lines) == 2, text
    assert "embedding decides 30% [20%, 40%]" in lines[0] and "small answers" in lines[0]
    assert "large answers" in lines[0] and "200 labels" in lines[0]
    unmeasured = render_estimates(result.plan, estimate_plan(result.plan, statistics(plan(), {}), PROFILES))
    assert "assumed: cascade_shares" in unmeasured


# greedy vs exhaustive over large / cascade / small ----------------------------------------


def random_chain(rng: random.Random, index: int) -> tuple[Node, PlanStatistics]:
    node: Node = memory_scan("docs", TABLE)
    for position in range(rng.randint(2, 4)):
        kind = rng.choice(("filter", "filter", "classify", "map"))
        instruction = f"{{note}} property {index}-{position}"
        if kind == "filter":
            node = SemFilter(input=node, instruction=instruction)
        elif kind == "classify":
            node = SemClassify(input=node, instruction=instruction, labels=("a", "b"), output=f"c{position}")
        else:
            node = SemMap(input=node, instruction=instruction, output=f"m{position}")
    semantic = [n for n in walk(node) if n.calls_llm]
    scan = next(n for n in walk(node) if not n.children)
    shares = {}
    for n in semantic:
        embedding = rng.uniform(0.0, 0.5)
        shares[statistics_key(n)] = (Interval.exact(embedding), Interval.exact(rng.uniform(0.0, 1.0 - embedding)))
    stats = PlanStatistics(
        source_rows={source_key(scan): Interval.exact(10_000)},  # type: ignore[arg-type]
        selectivity={statistics_key(n): Interval.exact(rng.uniform(0.05, 0.95)) for n in semantic},
        tokens_per_row={statistics_key(n): Interval.exact(rng.uniform(50, 800)) for n in semantic},
        tier_quality={(statistics_key(n), "small"): rng.uniform(0.9, 0.995) for n in semantic},
        cascade_shares=shares,
    )
    return node, stats


@pytest.mark.parametrize("bound", [0.8, 0.9, 0.95])
def test_greedy_with_the_cascade_rung_is_within_ten_percent_of_exhaustive(bound: float) -> None:
    rng = random.Random(int(bound * 100))
    policy = MinCost(quality=bound)
    for index in range(6):
        node, stats = random_chain(rng, index)
        estimator = cost_model_estimator(stats, PROFILES)
        paths = choosable_paths(node)
        targets = allocate_cascade_targets(node, estimator(node, None), policy)
        best = math.inf
        for combo in itertools.product(LADDER, repeat=len(paths)):
            tiers = dict(zip(paths, combo, strict=True))
            if any(tier == "cascade" and path not in targets for path, tier in tiers.items()):
                continue
            estimate = estimator(with_targets(node, tiers, targets), tiers)
            if policy.feasible(estimate):
                best = min(best, estimate.dollars.value)
        chosen = select_models(node, estimator, policy)
        assert chosen.estimate.quality >= bound
        assert chosen.estimate.dollars.value <= best * 1.10 + 1e-12, (index, chosen.tiers)
        without = select_models(node, estimator, policy, ladder=("large", "small"))
        assert chosen.estimate.dollars.value <= without.estimate.dollars.value + 1e-12  # the rung never hurts
