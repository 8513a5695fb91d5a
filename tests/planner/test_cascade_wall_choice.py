"""A cascade runs only when it is projected no slower than the large tier alone (no Ray, no model call).

The projection (`semray.cost_model.cascade_wall`) and the choice (`semray.planner.cascade_wall_choice`):
with instant simulated tiers the proxy pass alone outlasts the whole all-large run, so the cascade
gives way to the large tier; with the latencies of hosted models the large tier's calls dominate and
the cascade stays; ``Settings.cascade_max_slowdown`` lets a user keep a slower cascade.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import semray
from semray.cost_model.cascade_wall import STAGE_START_S, cascade_wall
from semray.cost_model.estimates import Interval
from semray.cost_model.head_tokens import head_token_statistics
from semray.cost_model.prices import TierProfile, profiles_from_serving
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Limit, Scan, Schema, SemClassify, SemFilter, SourceSpec
from semray.operators.keys import source_key, statistics_key
from semray.operators.semantic import QualityTarget
from semray.pipeline.runs.plan_time.before_run import prepare_run
from semray.planner.capabilities import rebuild
from semray.planner.cascade_wall_choice import choose_cascades_by_wall_time
from semray.serving.config import ServingConfig
from semray.serving.simulator.config import ModelProfile, SimulatorConfig
from semray.settings import Settings

ROWS = 600
# The medical cascade benchmark's tiers (benchmarks/cascade.py): MiniLM on CPU, and the simulated
# small and large tiers either instant ("zero") or with hosted models' latencies ("api").
EMBEDDING = TierProfile("embedding", 0.0, 0.0, 0.0, 3000.0, 8)
INSTANT = {
    "embedding": EMBEDDING,
    "small": TierProfile("small", 0.15, 0.6, 0.0, math.inf, 16),
    "large": TierProfile("large", 2.5, 10.0, 0.0, math.inf, 8),
}
HOSTED = {
    "embedding": EMBEDDING,
    "small": TierProfile("small", 0.15, 0.6, 0.0, math.inf, 16, latency_per_call_s=0.44),
    "large": TierProfile("large", 2.5, 10.0, 0.0, math.inf, 8, latency_per_call_s=0.48),
}


@pytest.fixture(scope="module")
def classify(tmp_path_factory: pytest.TempPathFactory) -> SemClassify:
    """A classification cascade over a CSV source (its rows and tokens are given as statistics)."""
    path = tmp_path_factory.mktemp("wall") / "symptoms.csv"
    path.write_text("symptoms\n" + "sneezing\n" * ROWS, encoding="utf-8")
    scan = Scan(source=SourceSpec(kind="csv", path=str(path)), source_schema=Schema.of(("symptoms", "VARCHAR")))
    labels = ("flu", "cold", "allergy")
    return SemClassify(input=scan, instruction="the diagnosis of {symptoms}", labels=labels, quality=QualityTarget())


def _statistics(node: SemClassify) -> PlanStatistics:
    key = statistics_key(node)
    (scan,) = [n for n in semray.operators.walk(node) if isinstance(n, Scan)]
    return PlanStatistics(
        source_rows={source_key(scan): Interval.exact(ROWS)},
        tokens_per_row={key: Interval.exact(60.0)},  # the prompt and a short text
        cascade_shares={key: (Interval.exact(0.0), Interval.exact(0.5))},
    )


def test_the_projection_overlaps_the_small_tier_with_the_large_tiers_labels_and_routed_rows() -> None:
    wall = cascade_wall(
        HOSTED,
        rows=Interval.exact(600),
        labels=Interval.exact(200),
        embedding_rows=Interval.exact(600),
        small_rows=Interval.exact(600),
        large_rows=Interval.exact(400),
        prompt=Interval.exact(100),
        embedded=Interval.exact(40),
        completion=Interval.exact(2),
    )
    proxies = 600 * 40 / 3000.0  # MiniLM's tokens a second, one replica, however many calls in flight
    labels, routed, small = 200 * 0.48 / 8, 200 * 0.48 / 8, 600 * 0.44 / 16
    assert wall.proxies.value == pytest.approx(STAGE_START_S + proxies)
    assert (wall.labels.value, wall.routed.value, wall.small.value) == pytest.approx((labels, routed, small))
    large_line = max(STAGE_START_S, labels) + routed
    assert wall.cascade.value == pytest.approx(STAGE_START_S + proxies + max(large_line, STAGE_START_S + small))
    assert wall.large_alone.value == pytest.approx(STAGE_START_S + 600 * 0.48 / 8)


def test_instant_tiers_put_the_cascade_on_the_large_tier(classify: SemClassify) -> None:
    choice = choose_cascades_by_wall_time(classify, INSTANT, _statistics(classify))
    (verdict,) = choice.choices
    assert not verdict.kept and verdict.wall.cascade.value > verdict.wall.large_alone.value
    assert isinstance(choice.plan, SemClassify)
    assert (choice.plan.tier, choice.plan.quality, choice.plan.cascades()) == ("large", None, None)


def test_hosted_latencies_keep_the_cascade(classify: SemClassify) -> None:
    choice = choose_cascades_by_wall_time(classify, HOSTED, _statistics(classify))
    (verdict,) = choice.choices
    assert verdict.kept and verdict.wall.slowdown < 1.0
    assert choice.plan == classify


def test_the_setting_lets_a_slower_cascade_run(classify: SemClassify) -> None:
    slowdown = choose_cascades_by_wall_time(classify, INSTANT, _statistics(classify)).choices[0].wall.slowdown
    assert slowdown > 1.0
    below = choose_cascades_by_wall_time(classify, INSTANT, _statistics(classify), max_slowdown=slowdown * 0.99)
    above = choose_cascades_by_wall_time(classify, INSTANT, _statistics(classify), max_slowdown=slowdown * 1.01)
    assert below.plan != classify and above.plan == classify
    assert (
        choose_cascades_by_wall_time(classify, INSTANT, _statistics(classify), max_slowdown=math.inf).plan == classify
    )


def test_a_pinned_cascade_and_one_under_a_limit_are_left_alone(classify: SemClassify) -> None:
    pinned = rebuild(classify, tier="cascade")
    kept = choose_cascades_by_wall_time(pinned, INSTANT, _statistics(pinned), pinned=[statistics_key(pinned)])
    assert kept.plan == pinned and kept.choices == ()
    limited = Limit(input=classify, count=500)
    assert choose_cascades_by_wall_time(limited, INSTANT, _statistics(classify)).plan == limited


def test_explain_gives_both_projected_times_and_the_verdict(classify: SemClassify) -> None:
    slow = choose_cascades_by_wall_time(classify, INSTANT, _statistics(classify)).explain()
    assert "Cascade or large tier by projected wall time (Settings.cascade_max_slowdown)" in slow
    assert "large tier, not a cascade: projected wall time: cascade " in slow
    assert ") · large tier alone 5.0 s;" in slow and "above cascade_max_slowdown 1" in slow
    fast = choose_cascades_by_wall_time(classify, HOSTED, _statistics(classify)).explain()
    assert "cascade kept: projected wall time" in fast and "within cascade_max_slowdown 1" in fast


def test_head_tokens_count_the_sources_first_rows(tmp_path: Path) -> None:
    path = tmp_path / "texts.csv"
    path.write_text("symptoms\n" + "".join(f"fever and a cough for {i} days\n" for i in range(100)), encoding="utf-8")
    node = SemFilter(input=semray.read_csv(path).plan, instruction="{symptoms} suggest an infection")
    (tokens,) = head_token_statistics([node], PlanStatistics()).tokens_per_row.values()
    assert 10 < tokens.value < 100  # the prompt with a short text, not the 100-token-a-cell default
    known = PlanStatistics(tokens_per_row={statistics_key(node): Interval.exact(7.0)})
    assert head_token_statistics([node], known).tokens_per_row == {}  # measured figures win


def _serving(large_latency: float) -> ServingConfig:
    models = {
        "sim-small": ModelProfile(
            latency_base_s=large_latency * 0.9, max_concurrency=16, price_in_per_million=0.15, price_out_per_million=0.6
        ),
        "sim-large": ModelProfile(
            latency_base_s=large_latency, max_concurrency=8, price_in_per_million=2.5, price_out_per_million=10.0
        ),
    }
    return ServingConfig(simulator=SimulatorConfig(models=models), cache_enabled=False)


@pytest.fixture
def symptoms_csv(tmp_path: Path) -> Path:
    path = tmp_path / "symptoms.csv"
    rows = "".join(f"{i},runny nose and sneezing since day {i}\n" for i in range(ROWS))
    path.write_text("symptom_id,symptoms\n" + rows, encoding="utf-8")
    return path


@pytest.mark.parametrize(("latency", "runs_as"), [(0.0, "large"), (0.48, "cascade")])
def test_the_run_and_explain_choose_by_the_tiers_latency(
    tmp_path: Path, symptoms_csv: Path, latency: float, runs_as: str
) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    query = (
        semray.read_csv(symptoms_csv, settings=settings)
        .with_serving(_serving(latency))
        .sem_classify("the diagnosis of {symptoms}", ["flu", "cold", "allergy"], output="d", quality=0.9)
    )
    prepared = prepare_run(query.plan, settings, _serving(latency), optimize=True, policy=None, measure=False)
    again = prepare_run(query.plan, settings, _serving(latency), optimize=True, policy=None, measure=False)
    assert again.plan == prepared.plan  # the same choice each time: a re-run finds the same journal to resume
    (node,) = [n for n in semray.operators.walk(prepared.plan) if isinstance(n, SemClassify)]
    assert node.resolved_tier() == runs_as
    text = query.explain()
    assert ("cascade kept" in text) == (runs_as == "cascade")
    assert ("large tier, not a cascade" in text) == (runs_as == "large")


def test_the_setting_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEMRAY_CASCADE_MAX_SLOWDOWN", "inf")
    assert Settings().cascade_max_slowdown == math.inf
    assert Settings(cascade_max_slowdown=1.0).cascade_max_slowdown == 1.0
    with pytest.raises(ValueError):
        Settings(cascade_max_slowdown=0.0)


def test_simulated_concurrency_is_the_simulators() -> None:
    profiles = profiles_from_serving(_serving(0.48))
    assert (profiles["small"].concurrency, profiles["large"].concurrency) == (16, 8)


@pytest.mark.parametrize(("latency", "runs_as"), [(0.0, "large"), (0.48, "cascade")])
def test_a_cascade_model_selection_chose_is_checked_too(
    tmp_path: Path, classify: SemClassify, latency: float, runs_as: str
) -> None:
    from semray.cost_model.policies import MinCost
    from semray.pipeline.runs.plan_time.before_run import optimized_choice

    open_tier = rebuild(classify, quality=None)  # tier auto without a target: model selection decides
    key = statistics_key(open_tier)
    statistics = _statistics(open_tier).merged(PlanStatistics(tier_quality={(key, "small"): 0.5}))
    settings = Settings(state_dir=tmp_path)
    choice = optimized_choice(open_tier, settings, _serving(latency), MinCost(quality=0.8), statistics)
    (verdict,) = choice.choices
    assert verdict.kept == (runs_as == "cascade")
    (node,) = [n for n in semray.operators.walk(choice.plan) if isinstance(n, SemClassify)]
    assert node.resolved_tier() == runs_as
