"""Shared fixtures: one local Ray on 127.0.0.1 for the whole session's integration tests."""

from __future__ import annotations

import os
import tempfile
import time
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

    if not ray.is_initialized():
        return
    # All apps are told to go at once and then watched every 50 ms: deleting them one by one
    # with serve.delete costs each app its replica's drain loop (2 s) plus the client's 1 s poll.
    # The wait stays, so the next module never sees an app that is still going.
    apps = list(serve.status().applications)
    for app in apps:
        serve.delete(app, _blocking=False)
    deadline = time.monotonic() + 60
    while going := sorted(set(apps) & set(serve.status().applications)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"Serve apps not deleted after 60 s: {going}")
        time.sleep(0.05)


@pytest.fixture(autouse=True, scope="module")
def _restore_logging() -> Iterator[None]:
    """The CLI sets the process-wide log level (warning by default); later modules that
    capture info events need it back."""
    yield
    from semray.log import configure_logging

    configure_logging("info", "auto")
