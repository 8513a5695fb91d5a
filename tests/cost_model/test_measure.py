"""measure_statistics: importance-sampled selectivities, progressive conjunctions, tokens, tier quality, labels."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pytest

from semray.cost_model.measure import Measurement, measure_statistics, passes, similarity_scores
from semray.cost_model.sampling import SamplingError
from semray.operators import Node, Scan, Schema, SemClassify, SemFilter, SourceSpec
from semray.operators.keys import statistics_key

SCAN = Scan(source=SourceSpec(kind="csv", path="r.csv"), source_schema=Schema.of(("t", "VARCHAR"), ("n", "BIGINT")))
CAT = SemFilter(input=SCAN, instruction="{t} mentions a cat")
BIG = SemFilter(input=CAT, instruction="{t} is about a big animal")
KIND = SemClassify(input=BIG, instruction="the animal in {t}", labels=("cat", "dog"))
N = 2000


def _rows() -> list[dict[str, object]]:
    rng = np.random.default_rng(5)
    cat, big = rng.random(N) < 0.2, rng.random(N) < 0.5
    return [
        {"_rowid": f"r{i}", "t": ("a cat" if cat[i] else "a dog") + (" big" if big[i] else " small"), "n": i}
        for i in range(N)
    ]


ROWS = _rows()
TRUE_CAT = np.mean([("cat" in str(r["t"])) for r in ROWS])
TRUE_BOTH = np.mean([("cat" in str(r["t"])) and ("big" in str(r["t"])) for r in ROWS])


class Labeller:
    """The top tier: the truth, counting the rows it is asked about per operator."""

    def __init__(self) -> None:
        self.asked: dict[str, int] = {}

    def __call__(self, node: Node, rows: Sequence[dict[str, object]]) -> list[object]:
        self.asked[node.label()] = self.asked.get(node.label(), 0) + len(rows)
        if node is CAT or node == CAT:
            return [("cat" in str(r["t"])) for r in rows]
        if node == BIG:
            return ["Yes" if "big" in str(r["t"]) else "No" for r in rows]
        return ["cat" if "cat" in str(r["t"]) else "dog" for r in rows]


def proxy(node: Node, rows: Sequence[dict[str, object]]) -> np.ndarray:
    word = "cat" if node == CAT else "big"
    return np.array([0.9 if word in str(r["t"]) else 0.1 for r in rows])


def wrong_on_small(node: Node, rows: Sequence[dict[str, object]]) -> list[object]:
    truth = Labeller()(node, rows)
    return [
        (not a if isinstance(a, bool) else a) if "small" in str(r["t"]) and r["n"] % 5 == 0 else a
        for a, r in zip(truth, rows, strict=True)
    ]


def test_one_filter_selectivity_tokens_and_labels_keyed_by_rowid() -> None:
    labeller = Labeller()
    found = measure_statistics(CAT, ROWS, proxy, labeller, budget=50, seed=3, token_rows=20)
    (op,) = found.operators
    assert op.selectivity is not None and op.selectivity.covers(TRUE_CAT)
    assert labeller.asked[CAT.label()] == len(op.labels) <= 50
    assert all(op.labels[r] == ("cat" in str(ROWS[int(r[1:])]["t"])) for r in op.labels)
    assert 40 < op.tokens_per_row.value < 80 and op.output_tokens_per_row.value == 1.0
    statistics = found.statistics()
    assert statistics_key(CAT) in statistics.selectivity and statistics_key(CAT) in statistics.tokens_per_row


def test_a_chain_labels_later_filters_only_on_rows_that_passed() -> None:
    labeller = Labeller()
    found = measure_statistics(
        (CAT, BIG, KIND), pa.Table.from_pylist(ROWS), proxy, labeller, budget=60, seed=1, token_rows=10
    )
    cat, big, kind = found.operators
    assert labeller.asked[BIG.label()] == len(big.labels) == sum(1 for v in cat.labels.values() if v)
    assert set(kind.labels) == {r for r, v in big.labels.items() if passes(v)}
    assert kind.selectivity is None and found.conjunction is not None
    assert found.conjunction.covers(TRUE_BOTH)
    chained = cat.selectivity.value * big.selectivity.value  # type: ignore[union-attr]
    assert chained == pytest.approx(found.conjunction.value, rel=0.35)


def test_conjunction_intervals_cover_the_truth_over_many_seeds() -> None:
    covered = [
        measure_statistics((CAT, BIG), ROWS, proxy, Labeller(), budget=50, seed=seed, token_rows=2).conjunction.covers(
            TRUE_BOTH
        )  # type: ignore[union-attr]
        for seed in range(150)
    ]
    assert np.mean(covered) >= 0.9


def test_tier_quality_is_agreement_with_the_top_tier() -> None:
    truth = np.mean([not ("small" in str(r["t"]) and int(r["n"]) % 5 == 0) for r in ROWS])  # type: ignore[call-overload]
    estimates = [
        measure_statistics(
            CAT, ROWS, proxy, Labeller(), budget=200, seed=s, token_rows=2, tier_labellers={"small": wrong_on_small}
        )
        .operators[0]
        .tier_quality["small"]
        for s in range(20)
    ]
    assert np.mean([e.covers(truth) for e in estimates]) >= 0.8
    measured: Measurement = measure_statistics(
        CAT, ROWS, proxy, Labeller(), budget=200, seed=0, token_rows=2, tier_labellers={"small": wrong_on_small}
    )
    quality = measured.statistics().tier_quality[(statistics_key(CAT), "small")]
    assert quality == measured.operators[0].tier_quality["small"].low
    assert set(measured.operators[0].tier_answers["small"]) == set(measured.operators[0].labels)


def test_a_budget_as_large_as_the_sample_labels_everything_exactly() -> None:
    rows = ROWS[:30]
    found = measure_statistics(CAT, rows, proxy, Labeller(), budget=30, token_rows=2)
    exact = np.mean([("cat" in str(r["t"])) for r in rows])
    (op,) = found.operators
    assert (
        op.selectivity is not None and (op.selectivity.low, op.selectivity.value, op.selectivity.high) == (exact,) * 3
    )


def test_bad_inputs_are_named_errors() -> None:
    with pytest.raises(SamplingError, match="_rowid"):
        measure_statistics(CAT, [{"t": "a cat"}] * 10, proxy, Labeller(), budget=5)
    with pytest.raises(SamplingError, match="only filters may precede"):
        measure_statistics((KIND, CAT), ROWS, proxy, Labeller())
    with pytest.raises(SamplingError, match="calls no model"):
        measure_statistics(SCAN, ROWS, proxy, Labeller())


def test_similarity_scores_peak_at_the_most_similar_row() -> None:
    scores = similarity_scores([[1.0, 0.1], [0.2, 1.0], [0.9, 0.2]], [1.0, 0.0])
    assert scores.argmax() == 0 and np.all(scores > 0) and scores.max() == 1.0
