"""Where shared labelled data lives, and a clear skip when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.harness.environment import REPO_ROOT

SHARED_DATA_ENV = "SEMRAY_SHARED_DATA"


class MissingData(Exception):
    """Data a benchmark needs is absent; the message says where it was looked for."""


def shared_data_dir() -> Path:
    """``$SEMRAY_SHARED_DATA`` if set, else ``../shared/data`` beside the repository."""
    configured = os.environ.get(SHARED_DATA_ENV)
    return Path(configured).expanduser() if configured else REPO_ROOT.parent / "shared" / "data"


def require_shared_data(*parts: str) -> Path:
    """The path of ``shared/data/<parts>``, or :class:`MissingData` saying what is missing.

    >>> require_shared_data("no-such-corpus")  # doctest: +SKIP
    Traceback (most recent call last):
    MissingData: benchmark data not found: .../shared/data/no-such-corpus ...
    """
    path = shared_data_dir().joinpath(*parts)
    if not path.exists():
        raise MissingData(
            f"benchmark data not found: {path} is absent. This benchmark needs the labelled data of "
            f"../shared/data (or a folder named by ${SHARED_DATA_ENV}); it is skipped where that is missing."
        )
    return path
