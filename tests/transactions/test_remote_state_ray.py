"""A semantic query on a local Ray with its run copied to an object store (``Settings.state_uri``).

Its actors commit batches to the driver's local journal; the driver's copy must carry every one
of them to the store, where another machine (another state folder) reads the same run.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from semray.demo import corpus
from semray.pipeline.runs.execute import publish_parquet
from semray.settings import Settings
from semray.transactions import list_runs, read_output

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _load_child() -> ModuleType:
    path = Path(__file__).with_name("pipeline_child.py")
    spec = importlib.util.spec_from_file_location("semray_pipeline_child_remote", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHILD = _load_child()


def test_a_semantic_run_is_read_whole_from_the_store(ray_settings: Settings, tmp_path: Path) -> None:
    del ray_settings  # only starts the session's Ray
    uri = (tmp_path / "bucket").as_uri()
    here = Settings(state_dir=tmp_path / "a", state_uri=uri, semantic_batch_size=8, semantic_actors=1, batch_size=256)
    data = tmp_path / "data"
    corpus.write(data, rows=60)
    query = CHILD.query(data, here)
    output = tmp_path / "out" / "aspects.parquet"
    written = publish_parquet(query.plan, here, output, CHILD.serving(data))
    (local,) = list_runs(here)
    (remote,) = list_runs(Settings(state_dir=tmp_path / "b", state_uri=uri))
    assert local.status == remote.status == "succeeded" and local.run_id == written.run_id
    assert remote.batches_committed == local.batches_committed > 1
    assert (remote.rows_committed, remote.usage) == (local.rows_committed, local.usage)
    assert read_output(output).num_rows == written.rows
    assert not (tmp_path / "b" / "runs").exists()
