"""A run that measures its statistics, plans with them and executes, on a local Ray: the demo
reviews, simulated small and large tiers that are both always right (priced like a small and a
large hosted model), the response cache off.

Measuring finds the small tier agreeing with the large one, so MinCost runs the filter on the
small tier; every row the small tier answered while measuring is reused at execution: the
small tier answers each input row exactly once over the whole run.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from semray.api import from_arrow
from semray.cost_model.policies import MinCost
from semray.demo.corpus import generate
from semray.demo.models import demo_serving
from semray.operators import walk
from semray.operators.semantic import Semantic
from semray.pipeline.runs.measure_in_run import MeasureOptions
from semray.pipeline.stages.semantic import estimation_key
from semray.serving.simulator.config import ModelProfile
from semray.settings import Settings
from semray.transactions import show_run

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # about 2 minutes on 2 loaded cores (three tiers deploy)

ROWS = 300
MODELS = {
    "sim-small": ModelProfile(error_rate=0.0, price_in_per_million=0.15, price_out_per_million=0.6),
    "sim-large": ModelProfile(error_rate=0.0, price_in_per_million=2.5, price_out_per_million=10.0),
}


def test_measured_run_reuses_its_labels_and_picks_the_small_tier(ray_settings: Settings, tmp_path: Path) -> None:
    corpus = generate(ROWS, seed=5)
    serving = demo_serving(corpus, models=MODELS).model_copy(update={"cache_enabled": False})
    query = from_arrow(corpus.reviews.select(["review_id", "review"]), settings=ray_settings).with_serving(serving)
    positive = query.sem_filter("{review} is positive")
    result = positive.execute(policy=MinCost(quality=0.8), measure=MeasureOptions(budget=80))

    truth = {
        row: label == "positive"
        for row, label in zip(
            corpus.labels.column("review_id").to_pylist(), corpus.labels.column("sentiment").to_pylist(), strict=True
        )
    }
    kept = {row for row, is_positive in truth.items() if is_positive}
    assert set(result.table.column("review_id").to_pylist()) == kept
    assert {node.tier for node in walk(result.plan) if isinstance(node, Semantic)} == {"small"}
    assert result.statistics is not None and result.statistics.selectivity

    costs = {cost.tier: cost for cost in result.measured.costs}
    labelled = costs["large"].rows
    assert 0 < labelled <= 80 and costs["small"].rows == labelled
    operators = {operator.operator_key: operator for operator in show_run(ray_settings, result.run_id).operators}
    key = costs["large"].key
    assert operators[estimation_key(key, "large")].rows_in == labelled
    assert operators[estimation_key(key, "small")].rows_in == labelled
    (executed,) = [op for name, op in operators.items() if not name.startswith("answers:")]
    # Reused answers are committed under the operator's key too, at no cost: every row counted, the
    # labelled ones not paid again (identical texts in one batch may share a call, hence <=).
    assert executed.rows_in == ROWS
    assert executed.usage.calls <= ROWS - labelled, "execution asked only the rows not labelled"
    assert "measuring:" in result.usage_line()

    # Written to a file through a run of its own: measured again, the same rows published.
    path = tmp_path / "positive.parquet"
    assert positive.write_parquet(path, policy=MinCost(quality=0.8), measure=MeasureOptions(budget=80)) == len(kept)
    assert set(pq.read_table(path).column("review_id").to_pylist()) == kept
