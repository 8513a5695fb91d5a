"""Statistics measured inside a run, without Ray: which operators, the pre-sample, the labels
journaled under the question's estimation key and reused by execution on the same tier only,
a resumed measurement that pays nothing, determinism, and measured statistics reaching model
selection. A fake tier answers from a dict of truths per tier and counts what it is asked.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from semray.cost_model import cascade_routes as router
from semray.cost_model.policies import MinCost
from semray.cost_model.prices import profiles_from_serving
from semray.operators import Filter, Scan, Schema, SemClassify, SemFilter, SemMap, SourceSpec
from semray.operators.base import Node, walk
from semray.operators.keys import statistics_key
from semray.operators.semantic import Semantic
from semray.pipeline.lowering.semantic import semantic_task
from semray.pipeline.runs.measure_in_run import (
    MeasureOptions,
    Presample,
    answer_values,
    draw_presample,
    measurable_chains,
    measure_chain,
)
from semray.pipeline.stages.semantic import estimation_key
from semray.pipeline.workers.semantic_batches import SemanticBatchUDF
from semray.planner import optimize
from semray.serving.config import ServingConfig
from semray.serving.contract import ModelRequest, ModelResponse, Usage
from semray.settings import Settings
from semray.transactions import BatchLedger, LLMUsage, Run, open_run

ROWS = 300
SCAN = Scan(
    source=SourceSpec(kind="csv", path="/data/pets.csv"), source_schema=Schema.of(("text", "VARCHAR"), ("n", "BIGINT"))
)
CATS = SemFilter(input=SCAN, instruction="{text} mentions a cat")


@dataclass
class FakeTiers:
    """Stands in for ``TierHandles``: ``truth[tier][row id]`` answers; cat texts embed near the instruction."""

    truth: Mapping[str, Mapping[str, object]]
    asked: dict[str, list[str]] = field(default_factory=dict)

    def generate(self, tier: str, requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        self.asked.setdefault(tier, []).extend(request.request_id for request in requests)
        return [
            ModelResponse(
                text=str(value := self.truth[tier][request.request_id]),
                value=value,
                confidence=0.9,
                usage=Usage(input_tokens=10, output_tokens=1, dollars=0.001),
                request_id=request.request_id,
                tier=tier,
            )
            for request in requests
        ]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([[1.0, 0.1] if "cat" in text else [0.1, 1.0] for text in texts])

    def calls(self, tier: str) -> int:
        return len(self.asked.get(tier, []))


def pets(rows: int = ROWS) -> pa.Table:
    texts = ["a cat sleeps" if i % 5 == 0 else "a dog runs" for i in range(rows)]
    return pa.table({"_rowid": [f"r{i:04d}" for i in range(rows)], "text": texts, "n": list(range(rows))})


def truths(table: pa.Table, small_wrong_every: int = 0) -> dict[str, dict[str, object]]:
    large = {row["_rowid"]: "cat" in row["text"] for row in table.to_pylist()}
    small = dict(large)
    if small_wrong_every:
        for index, row_id in enumerate(sorted(small)):
            if index % small_wrong_every == 0:
                small[row_id] = not small[row_id]
    return {"large": large, "small": small}


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    with open_run(Settings(state_dir=tmp_path), plan={"test": "measure"}, output=None) as opened:
        yield opened


def measure(tiers: FakeTiers, ledger: BatchLedger, table: pa.Table, budget: int = 40, seed: int = 5) -> object:
    return measure_chain((CATS,), Presample(table, table.num_rows), tiers, ledger, MeasureOptions(budget=budget), seed)


# which operators --------------------------------------------------------------------------------


def test_chains_are_semantic_operators_over_a_relational_input() -> None:
    relational = Filter(input=SCAN, predicate="n > 3")
    first = SemFilter(input=relational, instruction="{text} mentions a cat")
    second = SemFilter(input=first, instruction="{text} is short")
    label = SemClassify(input=second, instruction="the animal in {text}", labels=("cat", "dog"), output="animal")
    above = SemMap(input=label, instruction="a title for {text}", output="title")
    assert measurable_chains(above) == ((first, second, label),)
    # A map is no filter: the classification above it reads model output and is not measured.
    mapped = SemMap(input=SCAN, instruction="a title for {text}", output="title")
    on_top = SemClassify(input=mapped, instruction="the animal in {title}", labels=("cat", "dog"), output="animal")
    assert measurable_chains(on_top) == ((mapped,),)
    assert measurable_chains(relational) == ()


# the pre-sample ----------------------------------------------------------------------------------


def test_presample_is_deterministic_whatever_the_batch_order() -> None:
    table = pets(1000)
    batches = [table.slice(start, 128) for start in range(0, 1000, 128)]
    first = draw_presample(batches, 200, seed=11)
    again = draw_presample(list(reversed(batches)), 200, seed=11)
    assert first.table.equals(again.table) and first.rows == 1000 and first.table.num_rows == 200
    assert len(set(first.table.column("_rowid").to_pylist())) == 200
    other = draw_presample(batches, 200, seed=12)
    assert set(other.table.column("_rowid").to_pylist()) != set(first.table.column("_rowid").to_pylist())
    assert draw_presample(batches, 5000, seed=11).table.num_rows == 1000
    assert draw_presample([], 10, seed=1).rows == 0
    # Roughly uniform: the share of cat rows in the sample is near the input's fifth.
    cats = sum("cat" in text for text in first.table.column("text").to_pylist()) / 200
    assert 0.1 < cats < 0.3


# journaling and reuse ----------------------------------------------------------------------------


def test_estimation_labels_are_reused_at_execution_on_the_same_tier(run: Run) -> None:
    table = pets()
    tiers = FakeTiers(truths(table))
    measured = measure(tiers, run.ledger, table)
    labelled = tiers.calls("large")
    assert 0 < labelled <= 40 and tiers.calls("small") == labelled  # the small tier calibrated on the same rows
    assert {cost.tier: cost.rows for cost in measured.costs} == {"large": labelled, "small": labelled}  # type: ignore[attr-defined]
    # Execution (the operator with its input: a key of its own) on the large tier asks only the other rows.
    large = semantic_task(CATS)
    out = SemanticBatchUDF(large, "op-large", tiers, run.ledger)(table)  # type: ignore[arg-type]
    assert tiers.calls("large") == ROWS, "every row asked once: estimation's labels plus the rest"
    assert out.column("_rowid").to_pylist() == [f"r{i:04d}" for i in range(0, ROWS, 5)]
    # On the small tier, the small tier's calibration answers are reused the same way.
    small = dataclasses.replace(large, tier="small")
    SemanticBatchUDF(small, "op-small", tiers, run.ledger)(table)  # type: ignore[arg-type]
    assert tiers.calls("small") == ROWS


def test_answers_of_another_tier_are_never_reused(run: Run) -> None:
    table = pets(50)
    key = statistics_key(CATS)
    answers = SemanticBatchUDF(
        dataclasses.replace(semantic_task(CATS), tier="small"),
        estimation_key(key, "small"),
        FakeTiers(truths(table)),  # type: ignore[arg-type]
        run.ledger,
    ).answers(table)
    assert answers.num_rows == 50
    tiers = FakeTiers(truths(table))
    SemanticBatchUDF(semantic_task(CATS), "op", tiers, run.ledger)(table)  # type: ignore[arg-type]
    assert tiers.calls("large") == 50 and tiers.calls("small") == 0


def test_a_resumed_run_measures_again_for_free(run: Run) -> None:
    table = pets()
    first = FakeTiers(truths(table))
    before = measure(first, run.ledger, table)
    # A resumed run: the same run folder, the next attempt, the same seed (from the run id).
    again = FakeTiers(truths(table))
    after = measure(again, BatchLedger(run.path, run.attempt + 1), table)
    assert again.calls("large") == 0 and again.calls("small") == 0
    assert all(cost.reused == cost.rows and cost.usage == LLMUsage() for cost in after.costs)  # type: ignore[attr-defined]
    assert after.statistics.selectivity == before.statistics.selectivity  # type: ignore[attr-defined]
    assert after.statistics.tier_quality == before.statistics.tier_quality  # type: ignore[attr-defined]
    assert sum(cost.usage.calls for cost in before.costs) == first.calls("large") + first.calls("small")  # type: ignore[attr-defined]


def test_measuring_is_deterministic_given_the_seed(tmp_path: Path) -> None:
    table = pets()
    found = []
    for name in ("a", "b"):
        with open_run(Settings(state_dir=tmp_path / name), plan={"test": name}, output=None) as opened:
            tiers = FakeTiers(truths(table, small_wrong_every=7))
            measured = measure(tiers, opened.ledger, table, seed=9)
            found.append((sorted(tiers.asked["large"]), measured.statistics))  # type: ignore[attr-defined]
    (rows_a, stats_a), (rows_b, stats_b) = found
    assert rows_a == rows_b
    assert stats_a.selectivity == stats_b.selectivity and stats_a.tier_quality == stats_b.tier_quality
    key = statistics_key(CATS)
    assert abs(stats_a.selectivity[key].value - 0.2) < 0.05  # a fifth of the rows mention a cat


# statistics reach model selection ---------------------------------------------------------------


def _tiers_of(plan: Node) -> set[str]:
    return {node.tier for node in walk(plan) if isinstance(node, Semantic)}


def test_measured_quality_moves_the_operator_to_the_small_tier(run: Run) -> None:
    profiles = profiles_from_serving(ServingConfig())
    unmeasured = _tiers_of(optimize(CATS, None, profiles, MinCost(quality=0.9)))
    assert unmeasured != {"small"}, "an uncalibrated small tier guarantees nothing"
    table = pets(200)
    agreeing = measure(FakeTiers(truths(table)), run.ledger, table, budget=200)  # every row: exact
    chosen = optimize(CATS, agreeing.statistics, profiles, MinCost(quality=0.9))  # type: ignore[attr-defined]
    assert _tiers_of(chosen) == {"small"}
    # A small tier wrong on every third row does not answer alone (large or a cascade that checks it).
    with open_run(Settings(state_dir=run.path.parent.parent / "other"), plan={"t": 1}, output=None) as other:
        wrong = measure(FakeTiers(truths(table, small_wrong_every=3)), other.ledger, table, budget=200)
    assert _tiers_of(optimize(CATS, wrong.statistics, profiles, MinCost(quality=0.9))) != {"small"}  # type: ignore[attr-defined]


def test_answer_values_by_kind() -> None:
    answers = pa.table(
        {
            "_rowid": ["b", "a"],
            "_error": [None, "boom"],
            "_keep": [True, None],
        }
    )
    assert answer_values(answers, "filter", (), ["a", "b", "c"]) == [None, True, None]
    extracted = pa.table({"_rowid": ["a"], "_error": [None], "city": ["Oslo"], "day": [None]})
    assert answer_values(extracted, "extract", ("city", "day"), ["a"]) == [{"city": "Oslo", "day": None}]


# cascade pools ----------------------------------------------------------------------------------


def test_measuring_keeps_a_cascade_pool_as_the_cascade_would_see_it(run: Run) -> None:
    table = pets()
    truth = truths(table, small_wrong_every=4)
    tiers = FakeTiers(truth)
    measured = measure(tiers, run.ledger, table, budget=60)
    pool = measured.statistics.cascade_pools[statistics_key(CATS)]  # type: ignore[attr-defined]
    labelled = set(tiers.asked["large"])
    assert pool.kind == "filter" and pool.rows == len(labelled)
    # The proxy is the router's own: (cos + 1) / 2 between the row's and the instruction's embeddings.
    instruction = tiers.embed([router.instruction_text(CATS.instruction)])[0]
    cat, _ = router.filter_proxy(tiers.embed(["a cat", "a dog"]), instruction)
    assert [math.isclose(value, cat) for value in pool.proxy] == list(pool.large_answers), "proxy and answer aligned"
    wrong = sum(truth["small"][row] != truth["large"][row] for row in labelled)
    assert sum(a != b for a, b in zip(pool.small_answers, pool.large_answers, strict=True)) == wrong > 0
    assert set(pool.small_confidence) == {0.9}
    # Hansen-Hurwitz weights: a dog row, drawn only by the proposal's uniform share, weighs far
    # more than a cat row, which the proxy draws often; the pool stands for the whole pre-sample.
    dog = min(w for w, kept in zip(pool.weights, pool.large_answers, strict=True) if not kept)
    assert dog > 10 * max(w for w, kept in zip(pool.weights, pool.large_answers, strict=True) if kept)
    assert pool.population == ROWS  # the chain's first operator: every pre-sampled row reaches it
    assert 0 < pool.effective_rows <= pool.rows
    assert measured.statistics.cascade_shares == {}  # type: ignore[attr-defined]


def test_a_classification_pool_carries_the_nearest_label(run: Run) -> None:
    table = pets()
    animal = SemClassify(input=SCAN, instruction="the animal in {text}", labels=("cat", "dog"), output="animal")
    large = {row["_rowid"]: ("cat" if "cat" in row["text"] else "dog") for row in table.to_pylist()}
    tiers = FakeTiers({"large": large, "small": large})
    found = measure_chain((animal,), Presample(table, table.num_rows), tiers, run.ledger, MeasureOptions(budget=30), 3)
    pool = found.statistics.cascade_pools[statistics_key(animal)]
    assert pool.kind == "classify" and pool.proxy_answers == pool.large_answers  # the embedding is right here
    assert all(0.5 <= value <= 1.0 for value in pool.proxy)  # a softmax over two labels
