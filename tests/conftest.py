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
