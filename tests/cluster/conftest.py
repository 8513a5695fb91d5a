"""Fixtures of the multi-node tests."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A short folder under /tmp (Ray puts its unix sockets under it), removed after the test."""
    with tempfile.TemporaryDirectory(prefix="srn-", dir="/tmp", ignore_cleanup_errors=True) as folder:
        yield Path(folder)
