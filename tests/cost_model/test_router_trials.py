"""The whole cascade route (cost_model/cascade_routes.py) meets its target with probability 1 - delta.

Each trial draws a calibration sample with a new seed, chooses the embedding thresholds from
the top tier's labels of the draws, then the small tier's confidence threshold from its
answers, and measures the routed output's quality against the top tier's labels of every
row. Over 1,000 trials the failures must stay within the one-sided 99% binomial bound for
delta. The small tier is simulated like the simulator does: right with probability 0.9, its
confidence logit-normal with AUROC 0.8 between right and wrong answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest
from conftest import Generated, Medical
from cost_model_trials import TRIALS, binomial_upper

from benchmarks.workloads.definitions import INFECTIONS
from semray.cost_model import cascade_routes as router
from semray.cost_model.thresholds import ScoredRows

DELTA = 0.1
LABELS = 300
Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Population:
    kind: str
    proxy: npt.NDArray[np.float64]
    sorted_proxy: ScoredRows
    truth: Bools  # filters: the top tier keeps the row; classifications: unused
    proxy_right: Bools  # classifications: the proxy's label is the top tier's
    small_right: Bools
    small_confidence: npt.NDArray[np.float64]


def _small(n: int, seed: int) -> tuple[Bools, npt.NDArray[np.float64]]:
    rng = np.random.default_rng(seed)
    right = rng.random(n) < 0.9
    gap = np.sqrt(2.0) * 0.8416  # Phi^-1(0.8): AUROC 0.8 for unit-variance logits
    logits = rng.normal(np.where(right, gap, 0.0), 1.0)
    return right, 1.0 / (1.0 + np.exp(-logits))


def _filter(proxy: npt.NDArray[np.float64], truth: npt.NDArray[np.float64]) -> Population:
    right, confidence = _small(proxy.shape[0], 5)
    return Population(
        "filter", proxy, ScoredRows.from_scores(proxy), truth.astype(bool), np.zeros_like(right), right, confidence
    )


def _run_trial(population: Population, target: router.Target, seed: int) -> float:
    design = router.draw_calibration(target, population.proxy, seed)
    draws = design.draws
    route = router.route_embedding(
        target,
        population.sorted_proxy,
        design,
        population.truth[draws].astype(float),
        population.proxy_right[draws].astype(float),
    )
    asked = ~route.embedding_decides(population.proxy)
    confidence = np.where(asked, population.small_confidence, router.NOT_ASKED)
    route = router.route_small(route, population.proxy, confidence, design, population.small_right[draws].astype(float))
    tiers = route.tiers(population.proxy, confidence)
    tiers[design.rows_to_label] = router.LARGE  # the sample's own labels are reused
    return _quality(population, route, tiers, target.metric)


def _quality(population: Population, route: router.Route, tiers: npt.NDArray[np.int8], metric: str) -> float:
    if population.kind == "classify":
        right = np.where(tiers == router.EMBEDDING, population.proxy_right, True)
        right = np.where(tiers == router.SMALL, population.small_right, right)
        return float(right.mean())
    kept = np.where(tiers == router.EMBEDDING, route.embedding_answer(population.proxy), population.truth)
    kept = np.where(tiers == router.SMALL, population.truth == population.small_right, kept)
    if metric == "recall":
        return float((kept & population.truth).sum() / population.truth.sum())
    if metric == "precision":
        return float((kept & population.truth).sum() / max(kept.sum(), 1))
    return float((kept == population.truth).mean())


def _failures(population: Population, target: router.Target) -> tuple[int, float]:
    qualities = np.array([_run_trial(population, target, seed) for seed in range(TRIALS)])
    return int(np.sum(qualities < target.level)), float(np.median(qualities))


@pytest.fixture(scope="module")
def medical_filter(medical: Medical) -> Population:
    probabilities = _softmax(medical.similarity)
    infectious = np.array([name in INFECTIONS for name in medical.diagnoses])
    return _filter(probabilities[:, infectious].sum(axis=1), infectious[medical.diagnosis].astype(float))


@pytest.fixture(scope="module")
def medical_classify(medical: Medical) -> Population:
    probabilities = _softmax(medical.similarity)
    right, confidence = _small(probabilities.shape[0], 6)
    proxy_right = probabilities.argmax(axis=1) == medical.diagnosis
    truth = np.zeros(probabilities.shape[0], dtype=bool)
    proxy = probabilities.max(axis=1)
    return Population("classify", proxy, ScoredRows.from_scores(proxy), truth, proxy_right, right, confidence)


@pytest.fixture(scope="module")
def generated_filter(generated: Generated) -> Population:
    return _filter(generated.scores, generated.labels)


def _softmax(similarity: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    shifted = np.exp((similarity - similarity.max(axis=1, keepdims=True)) / router.LABEL_TEMPERATURE)
    return np.asarray(shifted / shifted.sum(axis=1, keepdims=True))


@pytest.mark.parametrize(("metric", "level"), [("accuracy", 0.9), ("recall", 0.9), ("precision", 0.8)])
def test_medical_filter_route_holds(medical_filter: Population, metric: str, level: float) -> None:
    target = router.Target("filter", metric, level, DELTA, LABELS)  # type: ignore[arg-type]
    failures, median = _failures(medical_filter, target)
    assert failures <= binomial_upper(TRIALS, DELTA), f"{failures} failures in {TRIALS}; median {metric} {median:.3f}"


def test_medical_classify_route_holds(medical_classify: Population) -> None:
    target = router.Target("classify", "accuracy", 0.9, DELTA, LABELS)
    failures, median = _failures(medical_classify, target)
    assert failures <= binomial_upper(TRIALS, DELTA), f"{failures} failures in {TRIALS}; median accuracy {median:.3f}"


@pytest.mark.parametrize(
    ("metric", "level"),
    [
        # ~15 s: each trial's route_small sorts all 100k confidences; the medical filter's
        # accuracy-0.9 route and the 100k recall route below stay in the default set.
        pytest.param("accuracy", 0.9, marks=pytest.mark.slow),
        ("recall", 0.9),
    ],
)
def test_generated_100k_filter_route_holds(generated_filter: Population, metric: str, level: float) -> None:
    target = router.Target("filter", metric, level, DELTA, LABELS)  # type: ignore[arg-type]
    failures, median = _failures(generated_filter, target)
    assert failures <= binomial_upper(TRIALS, DELTA), f"{failures} failures in {TRIALS}; median {metric} {median:.3f}"


def test_the_route_saves_large_calls_when_the_proxies_are_good(generated_filter: Population) -> None:
    target = router.Target("filter", "accuracy", 0.9, DELTA, LABELS)
    design = router.draw_calibration(target, generated_filter.proxy, seed=1)
    route = router.route_embedding(
        target,
        generated_filter.proxy,
        design,
        generated_filter.truth[design.draws].astype(float),
        np.zeros(design.n_draws),
    )
    asked = ~route.embedding_decides(generated_filter.proxy)
    confidence = np.where(asked, generated_filter.small_confidence, router.NOT_ASKED)
    route = router.route_small(
        route, generated_filter.proxy, confidence, design, generated_filter.small_right[design.draws].astype(float)
    )
    fractions = router.tier_fractions(route.tiers(generated_filter.proxy, confidence))
    assert fractions["large"] < 0.6, fractions
    assert fractions["embedding"] + fractions["small"] > 0.4


def test_targets_other_than_accuracy_are_for_filters() -> None:
    with pytest.raises(ValueError, match="for filters"):
        router.Target("classify", "recall")


def test_filter_and_classify_proxies() -> None:
    rows = np.array([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])
    score = router.filter_proxy(rows, np.array([1.0, 0.0]))
    assert score[0] == pytest.approx(1.0) and score[1] == pytest.approx(0.5) and score[0] > score[2] > score[1]
    label, confidence = router.classify_proxy(rows, np.array([[1.0, 0.0], [0.0, 1.0]]))
    assert label.tolist()[:2] == [0, 1] and confidence[2] == pytest.approx(0.5)
    assert router.instruction_text("{review} is positive") == "is positive"
