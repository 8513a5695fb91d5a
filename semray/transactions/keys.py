"""Run ids, fingerprints and batch keys: deterministic names for plans and units of work."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")


def new_run_id(now: datetime | None = None) -> str:
    """A sortable, unique run id, e.g. ``20261130-101500-3fa2c1`` (UTC time + random)."""
    moment = now or datetime.now(UTC)
    return f"{moment:%Y%m%d-%H%M%S}-{os.urandom(3).hex()}"


def is_run_id(text: str) -> bool:
    return bool(_RUN_ID.match(text))


def fingerprint(value: Any) -> str:
    """SHA-256 of a JSON value in canonical form (sorted keys, no spaces); a JSON string is parsed first.

    >>> fingerprint({"b": 1, "a": 2}) == fingerprint('{"a": 2, "b": 1}')
    True
    """
    if isinstance(value, str | bytes):
        value = json.loads(value)
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def batch_key(operator_key: str, row_ids: Iterable[str | int]) -> str:
    """Key of one batch of one operator: a hash of the operator key and the *set* of its row ids.

    Order-insensitive, so the same rows re-batched in another order find the committed batch.

    >>> batch_key("op1", ["b", "a"]) == batch_key("op1", ["a", "b"])
    True
    """
    digest = hashlib.sha256()
    digest.update(operator_key.encode())
    for row_id in sorted(str(r) for r in row_ids):
        encoded = row_id.encode()
        # Length-prefixed so ("ab","c") and ("a","bc") differ.
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.hexdigest()[:32]


def file_safe(name: str) -> str:
    """``name`` itself when it is a safe file name, else a stable hash of it."""
    if _SAFE_NAME.match(name):
        return name
    return "h-" + hashlib.sha256(name.encode()).hexdigest()[:32]
