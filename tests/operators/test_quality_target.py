"""Quality targets on semantic operators: which operators cascade, and what is refused."""

from __future__ import annotations

import pytest

from semray.errors import PlanError
from semray.operators.relational import Scan, SourceSpec
from semray.operators.schema import Column, Schema
from semray.operators.semantic import (
    QualityTarget,
    SemClassify,
    SemExtract,
    SemFilter,
    SemMap,
    as_quality,
    parse_fields,
    with_quality,
)
from semray.operators.serialize import plan_from_json, plan_to_json

SCAN = Scan(
    source=SourceSpec(kind="csv", path="/data/reviews.csv"),
    source_schema=Schema(columns=(Column(name="review", type="VARCHAR"),)),
)


def test_auto_tier_cascades_only_with_a_target() -> None:
    assert SemFilter(input=SCAN, instruction="{review} is positive").cascade_target() is None
    node = SemFilter(input=SCAN, instruction="{review} is positive", quality=QualityTarget(level=0.95))
    assert node.cascade_target() == QualityTarget(level=0.95)
    assert SemFilter(input=SCAN, instruction="{review} is positive", tier="cascade").cascade_target() == QualityTarget()
    assert "cascade accuracy>=0.95" in node.label()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda q: SemFilter(input=SCAN, instruction="{review} x", tier="small", quality=q), "needs tier 'auto'"),
        (
            lambda q: SemExtract(
                input=SCAN, instruction="{review}", fields=parse_fields("a"), tier="cascade", quality=q
            ),
            "one tier",
        ),
        (
            lambda q: SemMap(
                input=SCAN, instruction="{review}", output="o", quality=q.model_copy(update={"metric": "recall"})
            ),
            "metric 'accuracy'",
        ),
        (
            lambda q: SemClassify(
                input=SCAN, instruction="{review}", labels=("a", "b"), quality=q.model_copy(update={"metric": "recall"})
            ),
            "for filters",
        ),
    ],
)
def test_targets_that_cannot_be_met_are_refused_at_plan_time(make, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PlanError, match=message):
        make(QualityTarget()).output_schema  # noqa: B018


def test_a_map_or_extraction_takes_a_target_as_the_code_choices_bar_not_a_cascade() -> None:
    # no router cascades free text or fields: the target is the agreement a function must reach
    extract = SemExtract(
        input=SCAN, instruction="{review}", fields=parse_fields("a"), quality=QualityTarget(level=0.97)
    )
    free = SemMap(input=SCAN, instruction="{review}", output="o", quality=QualityTarget(level=0.97))
    for node in (extract, free):
        assert node.agreement_target() == QualityTarget(level=0.97) and node.cascade_target() is None
        assert node.resolved_tier() == "large" and not node.tier_is_open()
        assert "[code agreement>=0.97 delta=0.05]" in node.label()
    score = SemMap(
        input=SCAN, instruction="{review}", output="o", output_type="int", lo=1.0, hi=5.0, quality=QualityTarget()
    )
    assert score.agreement_target() is None and score.cascade_target() is not None


def test_bad_levels_fail_with_the_field() -> None:
    with pytest.raises(ValueError, match="level"):
        QualityTarget(level=1.5)


def test_query_level_quality_reaches_auto_operators_without_their_own() -> None:
    plan = SemMap(
        input=SemClassify(
            input=SemFilter(input=SCAN, instruction="{review} is long", quality=QualityTarget(level=0.8)),
            instruction="{review}",
            labels=("a", "b"),
        ),
        instruction="{review}",
        output="summary",
    )
    out = with_quality(plan, QualityTarget(metric="recall", level=0.95))
    assert isinstance(out, SemMap) and out.quality is None, "free text has no cascade"
    classify = out.input
    assert isinstance(classify, SemClassify) and classify.quality == QualityTarget(metric="accuracy", level=0.95)
    assert isinstance(classify.input, SemFilter) and classify.input.quality == QualityTarget(level=0.8)


def test_targets_survive_json_and_floats_mean_accuracy() -> None:
    node = SemFilter(input=SCAN, instruction="{review} is positive", quality=as_quality(0.97))
    assert plan_from_json(plan_to_json(node)) == node
    assert node.quality == QualityTarget(level=0.97)


def test_a_target_its_labels_cannot_certify_runs_on_the_large_tier_with_a_warning() -> None:
    from semray.operators.base import quality_warnings
    from semray.pipeline.lowering.semantic import semantic_task

    target = QualityTarget(level=0.999)
    assert not target.certifiable and target.labels_to_certify() == 2703
    assert QualityTarget(level=0.999, labels=2703).certifiable
    node = SemFilter(input=SCAN, instruction="{review} is positive", quality=target)
    assert node.cascade_target() == target and node.cascades() is None
    assert semantic_task(node).tier == "large"
    (warning,) = quality_warnings(node)
    assert "0.999" in warning and "200 calibration labels" in warning and "2,703" in warning
    assert "large" in node.label()
    certifiable = SemFilter(input=SCAN, instruction="{review} is positive", quality=QualityTarget(level=0.95))
    assert certifiable.cascades() is not None and quality_warnings(certifiable) == ()
    assert semantic_task(certifiable).tier == "cascade"


def test_a_strict_target_that_cannot_be_certified_is_refused() -> None:
    with pytest.raises(PlanError, match=r"0\.999.*cannot be certified.*strict=True"):
        SemFilter(input=SCAN, instruction="{review} is positive", quality=QualityTarget(level=0.999, strict=True))
    SemFilter(input=SCAN, instruction="{review} is positive", quality=QualityTarget(level=0.95, strict=True))


def test_certifiable_level_is_where_the_threshold_walk_stops_passing() -> None:
    """No error at all in the draws: the walk's Wilson bound at the target is exactly what
    certifiable_level says, so one label fewer than labels_to_certify cannot pass."""
    import numpy as np

    from semray.cost_model.sampling import draw_importance_sample
    from semray.cost_model.thresholds import select_confidence_threshold

    for level in (0.97, 0.99):
        needed = QualityTarget(level=level).labels_to_certify()
        rows = 20_000
        confidence = np.linspace(0.0, 1.0, rows)
        for budget, decides in ((needed - 5, False), (needed + 200, True)):
            design = draw_importance_sample(np.ones(rows), budget=budget, seed=3)
            choice = select_confidence_threshold(
                confidence, design, np.ones(design.draws.shape[0]), target_accuracy=level, delta=0.05
            )
            assert (choice.decided_fraction > 0) is decides, (level, budget, choice)


def test_the_result_of_a_run_carries_the_warning(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa

    import semray
    import semray.pipeline.runs.execute as run_module

    csv = tmp_path / "r.csv"
    csv.write_text("review\ngood\n", encoding="utf-8")
    monkeypatch.setattr(run_module, "execute", lambda *args: run_module.Result(pa.table({"review": ["good"]})))
    query = semray.read_csv(csv).sem_filter("{review} is positive", quality=0.999)
    (warning,) = query.execute(optimize=False).warnings
    assert "cannot be certified" in warning
    assert semray.read_csv(csv).sem_filter("{review} is positive", quality=0.9).execute(optimize=False).warnings == ()


def test_an_asked_cascade_its_labels_cannot_certify_runs_and_is_priced_on_the_large_tier() -> None:
    from semray.cost_model.estimates import Interval
    from semray.cost_model.plan_cost import estimate_plan
    from semray.cost_model.prices import TierProfile
    from semray.cost_model.statistics import PlanStatistics
    from semray.pipeline.lowering.semantic import semantic_task

    node = SemFilter(input=SCAN, instruction="{review} is positive", tier="cascade", quality=QualityTarget(level=0.999))
    assert node.cascades() is None and node.resolved_tier() == "large"
    assert semantic_task(node).tier == "large"
    large = TierProfile("large", 2.5, 10.0, 0.0, float("inf"), 8)
    statistics = PlanStatistics(source_rows={"csv:/data/reviews.csv": Interval.exact(10)})
    (priced,) = [op for op in estimate_plan(node, statistics, {"large": large}).operators if op.path == ""]
    assert priced.tier == "large"
