"""A run stopped at its budget (``Settings.max_cost``) and resumed with a higher one, on a local Ray.

The query (filter, then classify) runs on a simulated tier with a latency per call, so batches
take a while and the driver's watcher sees the cost grow between them. The reviews are padded
to several times the prompt size the cost model assumes (``tokens_per_row``), so the plan's
forecast passes the budget up front and the run's actual cost passes it midway. The cache is
off, so every row asked again would be paid again.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pytest
import ray

from semray.api import Query, read_csv
from semray.demo import corpus
from semray.demo.models import file_serving
from semray.operators.base import Node
from semray.pipeline.runs.budget import forecast
from semray.pipeline.runs.execute import Written, publish_parquet, resume
from semray.pipeline.runs.resume_record import Job
from semray.serving.config import ServingConfig
from semray.serving.simulator.config import ModelProfile
from semray.settings import Settings
from semray.transactions import RunCancelledError, list_runs, read_journal, read_output, show_run
from semray.transactions.journal import JOURNAL_NAME
from semray.transactions.records import BatchCommitted
from semray.transactions.registry import run_dir

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROWS = 120
PADDING = " ".join(["The parcel, the box and the paper were all exactly as the listing described them."] * 24)
SLOW = ModelProfile(error_rate=0.0, latency_base_s=0.05, price_in_per_million=2.5, price_out_per_million=10.0)


@pytest.fixture
def settings(ray_settings: Settings, tmp_path: Path) -> Settings:
    del ray_settings  # only starts the session's Ray
    return Settings(state_dir=tmp_path / "state", semantic_batch_size=8, semantic_actors=1, batch_size=256)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    paths = corpus.write(folder, rows=ROWS)
    reviews = pacsv.read_csv(paths["reviews"])
    padded = pc.binary_join_element_wise(reviews.column("review"), pa.scalar(PADDING), " ")
    pacsv.write_csv(reviews.set_column(reviews.column_names.index("review"), "review", padded), paths["reviews"])
    return folder


def serving(data: Path) -> ServingConfig:
    return file_serving(data, SLOW, "srbudget")


def query(data: Path, settings: Settings) -> Query:
    return (
        read_csv(data / "reviews.csv", settings=settings)
        .sem_filter("{review} is positive")
        .sem_classify("Which aspect does {review} discuss?", ["quality", "price", "delivery", "support"], "aspect")
        .with_serving(serving(data))
    )


def committed(settings: Settings, run_id: str) -> list[BatchCommitted]:
    records = read_journal(run_dir(settings, run_id) / JOURNAL_NAME).records
    return [record for record in records if isinstance(record, BatchCommitted)]


def tier_cpus(plan: Node, settings: Settings, config: ServingConfig) -> float:
    """CPUs the plan's tiers hold while deployed (they stay up between runs)."""
    tiers = [config.tier(tier) for tier in Job.prepare(plan, settings, config).tiers]
    return sum(tier.num_cpus * tier.replicas for tier in tiers)


def cpus_freed(held: float, within_s: float = 30.0) -> bool:
    """True once every CPU but ``held`` is free (an actor that exits takes a few seconds)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0.0) >= ray.cluster_resources()["CPU"] - held - 1e-6:
            return True
        time.sleep(0.5)
    return False


def rows_of(path: Path) -> list[dict[str, object]]:
    return sorted(read_output(path).to_pylist(), key=lambda row: str(row["review_id"]))


def test_a_run_stopped_at_its_budget_resumes_to_the_uninterrupted_output(
    data: Path, settings: Settings, tmp_path: Path
) -> None:
    plan, config = query(data, settings).plan, serving(data)
    expected = forecast(Job.prepare(plan, settings, config).plan, config)
    assert expected is not None and expected.dollars > 0
    whole = publish_parquet(plan, settings, tmp_path / "whole.parquet", config)
    # The premise: a budget the forecast passes up front is reached well before the run ends.
    budget = 1.2 * expected.dollars
    assert whole.usage.dollars > 2.5 * budget, (whole.usage, expected)

    output = tmp_path / "capped.parquet"
    capped = settings.model_copy(update={"max_cost": budget})
    with pytest.raises(RunCancelledError, match=r"stopped: cost \$[0-9.]+ reached the budget"):
        publish_parquet(plan, capped, output, config)
    (run_id,) = [run.run_id for run in list_runs(settings) if run.run_id != whole.run_id]
    stopped = show_run(settings, run_id)
    assert stopped.status == "cancelled"
    assert f"resume with `semray runs resume {run_id} --max-cost" in (stopped.final_message or "")
    assert 0 < stopped.usage.dollars < whole.usage.dollars / 2  # stopped midway, committed work kept
    assert stopped.rows_committed > 0 and not os.path.lexists(output)
    # The stop gave back its actor pools' CPUs (only the tier's Serve replicas keep theirs); a stopped
    # run's actors that lingered on made the resume below wait for ever on a 1-CPU task.
    assert cpus_freed(tier_cpus(plan, settings, config)), ray.available_resources()

    higher = settings.model_copy(update={"max_cost": 2 * whole.usage.dollars})
    finished = resume(higher, run_id, config)
    assert isinstance(finished, Written)
    done = show_run(settings, run_id)
    assert (done.status, done.attempts) == ("succeeded", 2)
    assert rows_of(output) == rows_of(whole.path) and finished.rows == whole.rows

    # No committed batch paid twice: every row committed once per operator, and the two attempts
    # together paid what the uninterrupted run did (the resume only for what was left).
    batches = committed(settings, run_id)
    rows = Counter((batch.operator_key, row_id) for batch in batches for row_id in batch.row_ids)
    assert max(rows.values()) == 1
    assert sorted(rows) == sorted(
        (batch.operator_key, row_id) for batch in committed(settings, whole.run_id) for row_id in batch.row_ids
    )
    assert (done.usage.calls, done.usage.tokens_in, done.usage.tokens_out) == (
        whole.usage.calls,
        whole.usage.tokens_in,
        whole.usage.tokens_out,
    )
    assert done.usage.dollars == pytest.approx(whole.usage.dollars)
    assert finished.attempt_usage.calls == done.usage.calls - stopped.usage.calls > 0
