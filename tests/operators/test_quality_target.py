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
        (lambda q: SemExtract(input=SCAN, instruction="{review}", fields=parse_fields("a"), quality=q), "one tier"),
        (lambda q: SemMap(input=SCAN, instruction="{review}", output="o", quality=q), "one tier"),
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
