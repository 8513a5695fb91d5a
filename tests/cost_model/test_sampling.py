"""Sampling designs and selectivity estimates: units, then issue 10's goals on a generated input.

Goals (issue 10): importance sampling reaches at least 2x lower mean squared error than
uniform sampling at equal labels, and nominal 95% intervals cover the truth in >= 93% of
1,000 trials.
"""

from __future__ import annotations

import numpy as np
import pytest
from cost_model_trials import TRIALS

from semray.cost_model.sampling import (
    Estimate,
    ImportanceProposal,
    SamplingError,
    draw_importance_sample,
    draw_uniform_sample,
    estimate_mean,
    sampling_probabilities,
)

LABELS = 100


def test_defensive_mixing_bounds_every_weight() -> None:
    scores = np.concatenate([np.zeros(900), np.ones(100)])
    design = draw_importance_sample(scores, 500, seed=0, defensive=0.2)
    assert design.weights.max() <= 1 / 0.2 + 1e-9
    assert sampling_probabilities(scores, defensive=0.2).sum() == pytest.approx(1.0)


def test_draws_are_deterministic_and_labelled_once() -> None:
    scores = np.random.default_rng(1).random(1000)
    first = draw_importance_sample(scores, 300, seed=9)
    second = draw_importance_sample(scores, 300, seed=9)
    assert np.array_equal(first.draws, second.draws)
    rows = first.rows_to_label
    assert rows.shape[0] < first.n_draws  # with replacement: repeats are paid once
    labels = first.labels_of_draws(scores[rows] > 0.5)
    assert np.array_equal(labels, (scores[first.draws] > 0.5).astype(float))


def test_uniform_sample_has_distinct_rows() -> None:
    design = draw_uniform_sample(50, 50, seed=3)
    assert sorted(design.draws.tolist()) == list(range(50))
    whole = estimate_mean(design, (design.draws < 10).astype(float))
    assert whole == Estimate(0.2, 0.2, 0.2, 0.95, 50, "uniform-wilson")  # the whole input: no uncertainty


@pytest.mark.parametrize(
    ("scores", "message"),
    [([], "non-empty"), ([0.1, -0.2], ">= 0"), ([0.1, float("nan")], "finite")],
)
def test_bad_scores_say_what_to_do(scores: list[float], message: str) -> None:
    with pytest.raises(SamplingError, match=message):
        sampling_probabilities(scores)


def test_labels_must_match_draws() -> None:
    design = draw_importance_sample(np.ones(10), 4, seed=0)
    with pytest.raises(SamplingError, match="one label per draw"):
        estimate_mean(design, [1.0, 0.0])


def test_no_positive_drawn_still_gives_an_interval() -> None:
    design = draw_importance_sample(np.linspace(0, 1, 1000), 50, seed=0)
    estimate = estimate_mean(design, np.zeros(50))
    assert estimate.value == 0.0
    assert 0.0 < estimate.high < 0.2


def _suite(scores: np.ndarray, rng: np.random.Generator) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Predicates of falling selectivity, each with a calibrated proxy (p = s**k)."""
    suite = []
    for k in (1, 2, 4):
        proxy = scores**k
        suite.append((f"p=s^{k}", proxy, (rng.random(scores.shape[0]) < proxy).astype(float)))
    return suite


@pytest.fixture(scope="module")
def trials(generated):  # type: ignore[no-untyped-def]
    """Per predicate: truth, importance and uniform estimates over 1,000 seeded trials at 100 labels."""
    results = []
    for name, proxy, labels in _suite(generated.scores, np.random.default_rng(5)):
        proposal = ImportanceProposal.from_scores(proxy)
        importance, uniform = [], []
        for seed in range(TRIALS):
            design = proposal.draw(LABELS, seed)
            importance.append(estimate_mean(design, labels[design.draws]))
            baseline = draw_uniform_sample(labels.shape[0], LABELS, seed)
            uniform.append(estimate_mean(baseline, labels[baseline.draws]))
        results.append((name, float(labels.mean()), importance, uniform))
    return results


def _mse(estimates: list[Estimate], truth: float) -> float:
    return float(np.mean([(e.value - truth) ** 2 for e in estimates]))


def test_importance_estimates_are_unbiased(trials) -> None:  # type: ignore[no-untyped-def]
    for name, truth, importance, _ in trials:
        values = np.array([e.value for e in importance])
        assert abs(values.mean() - truth) < 4 * values.std() / np.sqrt(len(values)), name


COMMON = pytest.mark.xfail(
    strict=True,
    reason="goal not met for a common predicate: measured 1.39x at selectivity 0.20 (2.5x at 0.086, 4.2x at 0.03);"
    " even the ideal sqrt(p) proposal only reaches ((E sqrt p)^2 - mu^2) vs (mu - mu^2) there",
)


@pytest.mark.parametrize("predicate", [pytest.param(0, marks=COMMON), 1, 2], ids=["p=s^1", "p=s^2", "p=s^4"])
def test_importance_has_half_the_squared_error_of_uniform(trials, predicate: int) -> None:  # type: ignore[no-untyped-def]
    name, truth, importance, uniform = trials[predicate]
    ratio = _mse(uniform, truth) / _mse(importance, truth)
    assert ratio >= 2.0, f"{name} (selectivity {truth:.3f}): uniform/importance MSE {ratio:.2f} at {LABELS} labels"


def test_nominal_95_intervals_cover_in_93_percent_of_trials(trials) -> None:  # type: ignore[no-untyped-def]
    for name, truth, importance, uniform in trials:
        for design, estimates in (("importance", importance), ("uniform", uniform)):
            coverage = np.mean([e.covers(truth) for e in estimates])
            assert coverage >= 0.93, f"{design} intervals for {name} cover {coverage:.3f}"


def test_split_keeps_the_draws_in_order() -> None:
    design = draw_importance_sample(np.linspace(0.0, 1.0, 100), 10, seed=2)
    first, rest = design.split(4)
    assert np.array_equal(np.concatenate([first.draws, rest.draws]), design.draws)
    with pytest.raises(SamplingError, match="at least 2"):
        design.split(9)


def test_labels_of_rows_must_match_rows_to_label() -> None:
    design = draw_importance_sample(np.ones(100), 10, seed=0)
    with pytest.raises(SamplingError, match="one per row"):
        design.labels_of_draws([1.0])
