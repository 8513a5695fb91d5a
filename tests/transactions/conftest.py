"""Fixtures for transactional runs: a state folder, an output folder and small tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from semray.settings import Settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path / "state")


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    path = tmp_path / "out"
    path.mkdir()
    return path
