"""semray's metrics and operator names on a local Ray, read back as the dashboard reads them.

The metrics are read from the Ray node's metrics export (the Prometheus endpoint the dashboard
and Prometheus scrape, ``MetricsExportPort`` of ``ray.nodes()``), not through a seam: the
driver's points reach it within Ray's report interval (about 10 s here), so the test polls it
for up to a minute and a half. Values are summed over the series of every worker
(``WorkerId`` tag) of the run.
"""

from __future__ import annotations

import re
import time
import urllib.request
from typing import Any

import pytest

from semray.demo.corpus import generate
from semray.demo.models import demo_serving
from semray.demo.queries import demo_sources
from semray.serving.config import ServingConfig
from semray.serving.simulator.config import ModelProfile
from semray.settings import Settings

pytestmark = pytest.mark.ray

ROWS = 120
INSTRUCTION = "{review} talks about delivery or shipping"
OPERATOR = "SemFilter[review talks about delivery or shipping]"
SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def serving(rows: int) -> ServingConfig:
    models = {
        "sim-small": ModelProfile(error_rate=0.0, price_in_per_million=0.1, price_out_per_million=0.4),
        "sim-large": ModelProfile(error_rate=0.0, price_in_per_million=2.5, price_out_per_million=10.0),
    }
    return demo_serving(generate(rows), models=models).model_copy(update={"cache_enabled": False})


@pytest.fixture(scope="module")
def config() -> ServingConfig:
    return serving(ROWS)


@pytest.fixture(scope="module")
def reviews(ray_settings: Settings, config: ServingConfig) -> Any:
    table, _ = demo_sources(ray_settings, ROWS)
    return table.with_serving(config)


def scrape() -> list[tuple[str, dict[str, str], float]]:
    import ray

    port = ray.nodes()[0]["MetricsExportPort"]  # type: ignore[no-untyped-call]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    samples = []
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if line.startswith("#") or match is None or "semray_" not in match["name"]:
            continue
        labels = dict(LABEL.findall(match["labels"] or ""))
        samples.append((match["name"], labels, float(match["value"])))
    return samples


def totals(samples: list[tuple[str, dict[str, str], float]], run: str) -> dict[tuple[str, str, str], float]:
    """(exported name, operator, tier) -> value summed over workers, for one run."""
    summed: dict[tuple[str, str, str], float] = {}
    for name, labels, value in samples:
        if labels.get("run") == run:
            key = (name, labels.get("operator", ""), labels.get("tier", ""))
            summed[key] = summed.get(key, 0.0) + value
    return summed


def wait_for(
    run: str, want: dict[tuple[str, str, str], float], timeout_s: float = 90.0
) -> dict[tuple[str, str, str], float]:
    deadline = time.monotonic() + timeout_s
    found: dict[tuple[str, str, str], float] = {}
    while time.monotonic() < deadline:
        found = totals(scrape(), run)
        if all(found.get(key) == pytest.approx(value) for key, value in want.items()):
            return found
        time.sleep(2)
    return found


@pytest.fixture(scope="module")
def finished(reviews: Any) -> Any:
    result = reviews.sem_filter(INSTRUCTION, tier="large").execute()
    assert result.run_id is not None and 0 < result.usage.calls <= ROWS and 0 < result.table.num_rows < ROWS
    assert result.usage.dollars > 0
    return result


def test_the_driver_reports_the_runs_progress_and_cost(finished: Any) -> None:
    want = {
        ("ray_semray_run_rows_done", "", ""): ROWS,
        ("ray_semray_run_rows_expected", "", ""): ROWS,
        ("ray_semray_run_progress", "", ""): 1.0,
        ("ray_semray_run_dollars", "", ""): finished.usage.dollars,
    }
    found = wait_for(finished.run_id, want)
    assert {key: found.get(key) for key in want} == {key: pytest.approx(value) for key, value in want.items()}
    assert found.get(("ray_semray_run_dollars_estimated", "", ""), 0.0) > 0  # estimated beside actual


def test_the_driver_counts_rows_calls_tokens_and_dollars_per_operator(finished: Any) -> None:
    """From the journal, in the driver, which outlives the actor pool: exact, and counted once
    (the actors no longer count these, so a sum over every worker's series is the run's)."""
    usage, on_large = finished.usage, (OPERATOR, "large")
    want = {
        ("ray_semray_rows_in_total", *on_large): ROWS,
        ("ray_semray_rows_out_total", *on_large): finished.table.num_rows,
        ("ray_semray_model_calls_total", *on_large): usage.calls,
        ("ray_semray_tokens_in_total", *on_large): usage.tokens_in,
        ("ray_semray_tokens_out_total", *on_large): usage.tokens_out,
        ("ray_semray_dollars_total", *on_large): usage.dollars,
    }
    found = wait_for(finished.run_id, want)
    assert {key: found.get(key) for key in want} == {key: pytest.approx(value) for key, value in want.items()}
    assert found.get(("ray_semray_failed_rows_total", *on_large), 0.0) == 0  # error_rate 0: none failed


@pytest.mark.slow  # waits out two of Ray's ~10 s report intervals whatever arrives: ~22 s
def test_what_only_the_actors_count_is_never_more_than_they_did(finished: Any) -> None:
    """Model requests and cache hits come from the actors, whose last points are lost when Ray Data
    ends the pool within Ray's ~10 s report interval: on a run this short they arrive in full on
    some runs and not at all on others (docs/cluster.md). What arrives is never counted twice."""
    on_large = (OPERATOR, "large")
    requests = ("ray_semray_model_requests_total", *on_large)
    found = wait_for(finished.run_id, {requests: ROWS}, timeout_s=20)
    assert found.get(requests, 0.0) <= ROWS
    # The cache is off: a hit is only a text repeated within one batch, asked once (the demo corpus
    # repeats some reviews word for word; how many share a batch depends on the batching).
    texts = generate(ROWS).reviews.column("review").to_pylist()
    assert found.get(("ray_semray_cache_hits_total", *on_large), 0.0) <= ROWS - len(set(texts))


def test_ray_data_names_the_operator_after_the_plan(
    reviews: Any, ray_settings: Settings, config: ServingConfig
) -> None:
    from semray.pipeline.ray import materialize
    from semray.pipeline.runs.resume_record import Job
    from semray.serving.deployments import start_tiers

    query = reviews.sem_filter(INSTRUCTION, tier="large")
    job = Job.prepare(query.plan, ray_settings, config)
    tiers = start_tiers(job.serving, ray_settings, tiers=list(job.tiers))
    context = materialize.with_actor_budget(job.stages, materialize.ExecutionContext(tiers=tiers))
    dataset = materialize.materialize(job.stages, context).materialize()
    assert dataset.count() > 0
    assert f"MapBatches({OPERATOR})" in dataset.stats()
    assert "SemanticBatchUDF" not in dataset.stats()
