"""Threshold selection: unit behaviour, then 1,000 seeded trials on a generated 100k input.

A trial fails when the chosen threshold misses the target on the whole input (measured
against the labels the sample was drawn from). A method with failure probability delta
passes when the failure count is within the one-sided 99% binomial bound for delta.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from cost_model_trials import TRIALS, Truth, binomial_upper

from semray.cost_model.sampling import ImportanceProposal, SamplingError, draw_importance_sample
from semray.cost_model.thresholds import (
    ScoredRows,
    select_cascade_thresholds,
    select_confidence_threshold,
    select_precision_threshold,
    select_recall_threshold,
)

DELTA = 0.05
BUDGET = 1000


@pytest.fixture(scope="module")
def setup(generated):  # type: ignore[no-untyped-def]
    rows = ScoredRows.from_scores(generated.scores)
    return rows, Truth.of(rows, generated.labels), ImportanceProposal.from_scores(generated.scores), generated.labels


def test_same_seed_same_thresholds(generated) -> None:  # type: ignore[no-untyped-def]
    choices = []
    for _ in range(2):
        design = draw_importance_sample(generated.scores, 500, seed=3)
        labels = generated.labels[design.draws]
        choices.append(
            (
                select_recall_threshold(generated.scores, design, labels, recall=0.9, delta=DELTA),
                select_precision_threshold(generated.scores, design, labels, precision=0.7, delta=DELTA),
                select_cascade_thresholds(generated.scores, design, labels, target_accuracy=0.95, delta=DELTA),
            )
        )
    assert choices[0] == choices[1]


def test_scores_must_cover_the_input(generated) -> None:  # type: ignore[no-untyped-def]
    design = draw_importance_sample(generated.scores, 100, seed=1)
    with pytest.raises(SamplingError, match="one score per row"):
        select_recall_threshold(generated.scores[:10], design, generated.labels[design.draws], recall=0.9, delta=0.1)
    with pytest.raises(SamplingError, match="delta"):
        select_recall_threshold(generated.scores, design, generated.labels[design.draws], recall=0.9, delta=0.7)


def test_no_signal_defers_everything() -> None:
    rng = np.random.default_rng(0)
    scores = rng.random(5000)
    labels = (rng.random(5000) < 0.5).astype(float)  # the proxy says nothing
    design = draw_importance_sample(scores, 400, seed=2)
    choice = select_cascade_thresholds(scores, design, labels[design.draws], target_accuracy=0.99, delta=0.05)
    assert choice.deferred_fraction > 0.9


def test_perfect_confidence_decides_everything_it_can() -> None:
    confidence = np.linspace(0.0, 1.0, 2000)
    correct = (confidence > 0.5).astype(float)  # the proxy is right exactly when confident
    design = draw_importance_sample(confidence, 400, seed=4)
    choice = select_confidence_threshold(confidence, design, correct[design.draws], target_accuracy=0.95, delta=0.05)
    assert 0.45 <= choice.decided_fraction <= 0.6
    assert not math.isinf(choice.threshold)


def _run_trials(setup, select, achieved, target: float) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    rows, truth, proposal, labels = setup
    failures, utility = 0, []
    for seed in range(TRIALS):
        design = proposal.draw(BUDGET, seed)
        choice = select(rows, design, labels[design.draws])
        failures += achieved(truth, choice) < target
        utility.append(choice.selected_fraction if hasattr(choice, "selected_fraction") else choice.deferred_fraction)
    return failures, float(np.mean(utility))


def test_recall_target_holds_with_probability_one_minus_delta(setup) -> None:  # type: ignore[no-untyped-def]
    failures, selected = _run_trials(
        setup,
        lambda rows, d, y: select_recall_threshold(rows, d, y, recall=0.9, delta=DELTA),
        lambda truth, c: truth.recall(c.threshold),
        0.9,
    )
    assert failures <= binomial_upper(TRIALS, DELTA), f"{failures} of {TRIALS} trials missed recall 0.9"
    assert selected < 0.8, f"the thresholds select {selected:.2f} of rows: too timid to be useful"


def test_precision_target_holds_with_probability_one_minus_delta(setup) -> None:  # type: ignore[no-untyped-def]
    failures, selected = _run_trials(
        setup,
        lambda rows, d, y: select_precision_threshold(rows, d, y, precision=0.7, delta=DELTA),
        lambda truth, c: truth.precision(c.threshold),
        0.7,
    )
    assert failures <= binomial_upper(TRIALS, DELTA), f"{failures} of {TRIALS} trials missed precision 0.7"
    assert selected > 0.02, f"the thresholds select only {selected:.3f} of rows"


def test_cascade_accuracy_holds_with_probability_one_minus_delta(setup) -> None:  # type: ignore[no-untyped-def]
    failures, deferred = _run_trials(
        setup,
        lambda rows, d, y: select_cascade_thresholds(rows, d, y, target_accuracy=0.95, delta=DELTA),
        lambda truth, c: truth.accuracy(c.low, c.high),
        0.95,
    )
    assert failures <= binomial_upper(TRIALS, DELTA), f"{failures} of {TRIALS} trials missed accuracy 0.95"
    assert deferred < 0.8, f"the cascade defers {deferred:.2f} of rows: too timid to be useful"
