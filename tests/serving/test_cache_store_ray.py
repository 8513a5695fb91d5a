"""A semantic query on a local Ray with a state URI on moto's S3 server: its cache reaches the store, and
the same query from a fresh state folder (another machine's, the same URI) pays no model call.

The end-to-end path of ``serving/cache_store.py``: the run pushes its tiers' new entries when it ends
(``response_cache_in_store``), and ``start_tiers`` pulls them into a cache that lacks them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray
from ray import serve
from s3_server import ENVIRON, S3Server

from semray.api import read_csv
from semray.demo import corpus
from semray.demo.models import file_serving
from semray.pipeline.runs.execute import execute
from semray.serving.cluster_cache import CLUSTER_CACHE_NAME, HEAD_NODE_RESOURCE, NAMESPACE, CacheOwner
from semray.serving.config import ServingConfig
from semray.serving.deployed import deployed_apps
from semray.serving.simulator.config import ModelProfile
from semray.settings import Settings

pytestmark = [pytest.mark.ray, pytest.mark.slow]

EXACT = ModelProfile(error_rate=0.0, latency_base_s=0.0, price_in_per_million=2.5, price_out_per_million=10.0)
"""No simulated errors: an error is never cached, so a row that failed would be paid again."""


@pytest.mark.parametrize("scope", ["node", "cluster"])
def test_a_fresh_state_folder_answers_the_same_query_from_the_store_with_0_calls(
    ray_settings: Settings, tmp_path: Path, scope: str
) -> None:
    """``node``: the cache is this node's file. ``cluster``: the head node's cache actor, killed between the
    runs with the tiers' apps, as with a lost head node; the next run's actor opens the fresh folder's empty
    file. The actor is started here, as ``ensure_cluster_cache`` would, with the store's (fake) credentials
    in its environment, as a head node has them (the session's Ray was started without them)."""
    del ray_settings  # only starts the session's Ray
    data = tmp_path / "data"
    corpus.write(data, rows=40)
    serving = file_serving(data, EXACT, f"srcache{scope}").model_copy(
        update={"cache_enabled": True, "cache_scope": scope}
    )
    with S3Server.start() as server:
        runs: list[tuple[int, int]] = []
        for machine in ("a", "b"):
            settings = Settings(
                state_dir=tmp_path / machine,
                state_uri=server.uri("semray"),
                state_endpoint=server.endpoint,
                semantic_batch_size=8,
                semantic_actors=1,
                batch_size=256,
            )
            if scope == "cluster":
                _start_cluster_cache(settings, serving)
            query = read_csv(data / "reviews.csv", settings=settings).sem_filter("{review} is positive")
            result = execute(query.with_serving(serving).plan, settings, serving)
            runs.append((result.table.num_rows, result.attempt_usage.calls))
            _kill_cluster_cache(serving)
        segments = [key for key in server.objects("semray/cache/segments/")]
        twice = {key for key, puts in server.versions("semray").items() if puts > 1}
    (rows_a, calls_a), (rows_b, calls_b) = runs
    assert calls_a > 30 and rows_a == rows_b
    assert calls_b == 0, "the fresh folder's cache was seeded from the store"
    assert segments and {key.rsplit("/", 1)[1] for key in twice} <= {"lease.json", "attempt", "CANCEL"}
    assert (tmp_path / "b" / "cache" / "responses.sqlite").is_file()


def _start_cluster_cache(settings: Settings, serving: ServingConfig) -> None:
    path = serving.cache_path(settings.state_path)
    assert path is not None and not path.exists()
    owner: Any = ray.remote(CacheOwner)
    handle = owner.options(
        name=CLUSTER_CACHE_NAME,
        namespace=NAMESPACE,
        lifetime="detached",
        num_cpus=0,
        resources={HEAD_NODE_RESOURCE: 0.001},
        runtime_env={"env_vars": ENVIRON},
    ).remote(str(path), 10.0)
    ray.get(handle.where.remote())


def _kill_cluster_cache(serving: ServingConfig) -> None:
    """The cache actor and the tiers (whose replicas hold its handle) go, as with their head node."""
    for app in deployed_apps(serving.app_prefix):
        serve.delete(app)
    try:
        ray.kill(ray.get_actor(CLUSTER_CACHE_NAME, namespace=NAMESPACE))
    except ValueError:  # none runs (the node scope)
        return
