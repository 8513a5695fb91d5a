"""Fingerprints of what can change a model's answers, for the response cache key.

A cached answer may be served again only to a request that would get the same answer: same
backend kind, model, endpoint or weights, simulator tables and seed, prompt version and
sampling parameters. The tier builds its identity from the tier config plus the backend's own
``identity`` (``tier.tier_identity``); this module fingerprints the parts that live outside the
config: weight folders, data files and in-process Arrow tables.

>>> len(fingerprint_text("anything"))
16
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

CONTENT_HASH_LIMIT = 16 * 1024 * 1024
"""Files up to this size are hashed by content; larger ones (model weights) by name, size and mtime."""


def fingerprint_text(text: str) -> str:
    """A short stable digest of ``text``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def fingerprint_json(value: Any) -> str:
    """A short digest of canonical JSON of ``value`` (keys sorted)."""
    return fingerprint_text(json.dumps(value, sort_keys=True, separators=(",", ":"), default=str))


def file_fingerprint(path: Path) -> str:
    """Content digest of a small file; name, size and modification time of a large one; ``missing``."""
    try:
        stat = path.stat()
    except OSError:
        return f"missing:{path}"
    if stat.st_size > CONTENT_HASH_LIMIT:
        return f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}"
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return f"unreadable:{path}:{stat.st_size}:{stat.st_mtime_ns}"
    return digest.hexdigest()[:16]


def path_fingerprint(path: Path | None) -> str:
    """A file's fingerprint, or every file's in a folder (weights folders), or '' for None."""
    if path is None:
        return ""
    resolved = path.expanduser()
    if resolved.is_dir():
        parts = [
            f"{child.relative_to(resolved)}={file_fingerprint(child)}"
            for child in sorted(resolved.rglob("*"))
            if child.is_file()
        ]
        return fingerprint_text("\n".join(parts))
    return file_fingerprint(resolved)


def table_fingerprint(table: Any) -> str:
    """Digest of an Arrow table's schema and contents (its IPC stream)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()[:16]
