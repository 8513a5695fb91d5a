"""Shared fixtures: one local Ray on 127.0.0.1 for the whole session's integration tests."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture(scope="session")
def ray_settings() -> Iterator[object]:
    """Settings whose state (and Ray temp dir) live in a short temporary folder; starts Ray."""
    from semray.cluster.connect import connect, shutdown
    from semray.settings import Settings

    with tempfile.TemporaryDirectory(prefix="sr-", dir="/tmp") as folder:
        settings = Settings(state_dir=Path(folder), batch_size=256)
        connect(settings)
        yield settings
        shutdown()


@pytest.fixture(autouse=True, scope="module")
def _free_serve_replicas() -> Iterator[None]:
    """Delete every Serve app after each module, so replicas deployed for one module's
    configuration never hold CPUs that a later module's tasks wait for."""
    yield
    import sys

    if "ray.serve" not in sys.modules:
        return
    import ray
    from ray import serve

    if ray.is_initialized():
        for app in list(serve.status().applications):
            serve.delete(app)


@pytest.fixture(autouse=True, scope="module")
def _restore_logging() -> Iterator[None]:
    """The CLI sets the process-wide log level (warning by default); later modules that
    capture info events need it back."""
    yield
    from semray.log import configure_logging

    configure_logging("info", "auto")
