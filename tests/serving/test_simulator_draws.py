"""The error and confidence model, at the pure-function level (10,000 draws each)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from semray.serving.simulator.config import ConfidenceProfile
from semray.serving.simulator.draws import confidence, confidence_logit, is_wrong, question_key, unit_draw

DRAWS = 10_000


def _auroc(scores_correct: np.ndarray, scores_wrong: np.ndarray) -> float:
    """Mann-Whitney AUROC: P(score of a correct answer > score of a wrong one)."""
    scores = np.concatenate([scores_correct, scores_wrong])
    ranks = scores.argsort().argsort() + 1.0
    rank_sum = ranks[: len(scores_correct)].sum()
    n1, n0 = len(scores_correct), len(scores_wrong)
    return float((rank_sum - n1 * (n1 + 1) / 2) / (n1 * n0))


def _hanley_mcneil_se(auroc: float, n1: int, n0: int) -> float:
    q1, q2 = auroc / (2 - auroc), 2 * auroc**2 / (1 + auroc)
    variance = (auroc * (1 - auroc) + (n1 - 1) * (q1 - auroc**2) + (n0 - 1) * (q2 - auroc**2)) / (n1 * n0)
    return math.sqrt(variance)


def test_unit_draw_is_uniform_and_stable() -> None:
    values = np.array([unit_draw("x", i) for i in range(DRAWS)])
    assert values.min() > 0.0 and values.max() < 1.0
    assert abs(values.mean() - 0.5) < 4 * math.sqrt(1 / 12 / DRAWS)
    assert unit_draw("x", 1) == unit_draw("x", 1)
    assert unit_draw("x", 1) != unit_draw("x", 2)


@pytest.mark.parametrize("error_rate", [0.05, 0.2, 0.5])
def test_error_rate_within_binomial_tolerance(error_rate: float) -> None:
    wrong = sum(is_wrong(question_key(3, "sim-small", "sentiment", [f"reviews:{i}"]), error_rate) for i in range(DRAWS))
    tolerance = 4 * math.sqrt(error_rate * (1 - error_rate) / DRAWS)
    assert abs(wrong / DRAWS - error_rate) < tolerance


def test_errors_depend_on_row_set_not_order() -> None:
    a = question_key(0, "m", "same_city", ["reviews:r2", "reviews:r1"])
    b = question_key(0, "m", "same_city", ["reviews:r1", "reviews:r2"])
    assert a == b


def test_models_err_on_different_questions() -> None:
    small = [is_wrong(question_key(0, "small", "t", [str(i)]), 0.3) for i in range(DRAWS)]
    other = [is_wrong(question_key(0, "other", "t", [str(i)]), 0.3) for i in range(DRAWS)]
    both = sum(s and o for s, o in zip(small, other, strict=True)) / DRAWS
    assert abs(both - 0.09) < 4 * math.sqrt(0.09 * 0.91 / DRAWS)  # independent across models


@pytest.mark.parametrize("auroc", [0.6, 0.8, 0.95])
def test_confidence_auroc_matches_configuration(auroc: float) -> None:
    profile = ConfidenceProfile(auroc=auroc)
    correct_scores, wrong_scores = [], []
    for i in range(DRAWS):
        question = question_key(5, "sim-small", "positive", [f"reviews:{i}"])
        wrong = is_wrong(question, 0.3)
        (wrong_scores if wrong else correct_scores).append(confidence(question, not wrong, profile, options=2))
    measured = _auroc(np.array(correct_scores), np.array(wrong_scores))
    se = _hanley_mcneil_se(auroc, len(correct_scores), len(wrong_scores))
    assert abs(measured - auroc) < 4 * se, (measured, auroc, se)


def test_confidence_logits_have_the_documented_means() -> None:
    profile = ConfidenceProfile(auroc=0.8, correct_mean_logit=2.0, sigma=1.0)
    assert profile.mean_gap == pytest.approx(math.sqrt(2) * 0.8416212335729143)
    correct = np.array([confidence_logit(("q", i), True, profile) for i in range(DRAWS)])
    wrong = np.array([confidence_logit(("q", i), False, profile) for i in range(DRAWS)])
    assert abs(correct.mean() - 2.0) < 4 / math.sqrt(DRAWS)
    assert abs(wrong.mean() - profile.wrong_mean_logit) < 4 / math.sqrt(DRAWS)
    assert abs(correct.std() - 1.0) < 0.05


@pytest.mark.parametrize("options", [2, 5, 24])
def test_confidence_stays_above_alternatives(options: int) -> None:
    profile = ConfidenceProfile()
    values = [confidence(("q", i), i % 2 == 0, profile, options) for i in range(1000)]
    assert all(1 / options < value < 1 for value in values)
