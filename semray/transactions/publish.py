"""Atomic publish of a run's results to its output path, with optimistic concurrency.

Layout next to an output ``<dir>/<name>`` (same filesystem, so publishing is a rename):

    <dir>/.<name>.semray/publish.lock      flock held while publishing
    <dir>/.<name>.semray/staging/<run>-a<N>[.parquet]   what a run writes before publishing
    <dir>/.<name>.semray/versions/<run>-a<N>[.parquet]  published versions (current + previous)
    <dir>/<name>   file output: a hard link to the current version's file
                   folder output: a symlink to ``.<name>.semray/versions/<version>``

A version becomes visible with one ``os.replace`` of ``<name>`` (atomic on POSIX), so a
reader sees the old or the new version, never a mixture or a partial one. In a folder
output every file name carries its version, so a reader that lists the folder before a
swap and opens files after it gets ``FileNotFoundError`` (retry), never rows of two versions. The version
is derived from what ``<name>`` is (the inode it links, or the symlink's target), so
publish and version bump are one atomic step.

Isolation rule (optimistic commit): a run remembers the output version it started from;
publishing, under the publish lock, fails with ``TransactionConflictError`` when the
version changed in between. First committer wins; the loser publishes nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from semray.log import get_logger
from semray.transactions.durability import (
    exclusive_lock,
    fsync_directory,
    fsync_tree,
    make_directory_durably,
    write_bytes_atomically,
)
from semray.transactions.errors import OutputTargetError, TransactionConflictError, TransactionError
from semray.transactions.records import OutputTarget

log = get_logger(__name__)

RETAIN_SUPERSEDED_S = 600.0
"""How long a superseded folder version stays, for readers that resolved the output before the swap."""


def sidecar(target: OutputTarget) -> Path:
    path = Path(target.path)
    return path.with_name(f".{path.name}.semray")


def version_name(run_id: str, attempt: int, target: OutputTarget) -> str:
    return f"{run_id}-a{attempt}" + (".parquet" if target.kind == "file" else "")


def staging_path(target: OutputTarget, run_id: str, attempt: int) -> Path:
    """Where a run writes its results before publishing; created (a folder for folder outputs)."""
    path = sidecar(target) / "staging" / version_name(run_id, attempt, target)
    make_directory_durably(path.parent)
    if target.kind == "folder":
        make_directory_durably(path)
    return path


def check_publishable(target: OutputTarget) -> None:
    """Fail before any work when the output path cannot be replaced atomically."""
    path = Path(target.path)
    if not path.parent.is_dir():
        raise OutputTargetError(f"output folder {path.parent} does not exist; create it first")
    if target.kind == "folder" and path.exists() and not path.is_symlink():
        raise OutputTargetError(
            f"output {path} exists and was not published by semray, so it cannot be replaced atomically; "
            "remove it or choose another output path"
        )
    if target.kind == "file" and path.is_dir():
        raise OutputTargetError(f"output {path} is a folder; name a .parquet file or ask for a folder output")


def current_version(target: OutputTarget) -> str | None:
    """The version now visible under the output name; None when nothing is there.

    An output file that semray did not publish gets a ``foreign:`` token from its inode,
    size and modification time, so a change to it is still seen as a conflict.
    """
    path = Path(target.path)
    if not os.path.lexists(path):
        return None
    if path.is_symlink():
        return Path(os.readlink(path)).name
    info = path.stat()
    versions = sidecar(target) / "versions"
    if versions.is_dir():
        for entry in versions.iterdir():
            try:
                entry_info = entry.stat()
            except FileNotFoundError:  # an old version being removed by a publisher
                continue
            if (entry_info.st_dev, entry_info.st_ino) == (info.st_dev, info.st_ino) and not entry.name.startswith("."):
                return entry.name
    return f"foreign:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"


def read_output(path: str | Path) -> pa.Table:
    """Read one whole published version, even while another run publishes over it.

    A reader that resolves the output path once per file can straddle a swap: for a folder
    it then gets an error or, from pyarrow's listing, an empty table. This resolves the path
    once: the folder's current version (kept ``RETAIN_SUPERSEDED_S`` after it is superseded),
    or the file's inode through one open descriptor.

    >>> read_output("out/result").num_rows  # doctest: +SKIP
    1200
    """
    resolved = Path(os.path.realpath(path))
    if resolved.is_dir():
        return pq.read_table(resolved)
    with resolved.open("rb") as handle:
        return pq.read_table(handle)


def stage_table(target: OutputTarget, staged: Path, table: pa.Table) -> None:
    """Write a whole result table into the staging location (a convenience for small results)."""
    destination = staged if target.kind == "file" else staged / "part-00000.parquet"
    pq.write_table(table, destination)


def publish(target: OutputTarget, staged: Path, version: str, base_version: str | None, run_id: str) -> None:
    """Make the staged results the output, atomically, unless another run published since ``base_version``."""
    if not staged.exists():
        raise TransactionError(f"run {run_id} has nothing staged at {staged}; write its results there first")
    check_publishable(target)
    if target.kind == "folder":
        _tag_file_names(staged, version)
    fsync_tree(staged)
    root = sidecar(target)
    versions = root / "versions"
    make_directory_durably(versions)
    with exclusive_lock(root / "publish.lock", f"the publish lock of {target.path}", wait_s=60.0):
        found = current_version(target)
        if found != base_version:
            raise TransactionConflictError(target.path, base_version, found, run_id)
        entry = versions / version
        os.rename(staged, entry)
        fsync_directory(versions)
        fsync_directory(staged.parent)
        _swap(target, entry)
        _remove_old_versions(target, versions, current=version, previous=found)
    log.info("output_published", output=target.path, version=version, run_id=run_id)


def discard_staging(target: OutputTarget, run_id: str, attempt: int | None = None) -> None:
    """Remove what an attempt (or, with no attempt, every attempt of the run) staged; it was never visible."""
    root = sidecar(target) / "staging"
    pattern = version_name(run_id, attempt, target) if attempt is not None else f"{run_id}-a*"
    for path in root.glob(pattern) if root.is_dir() else ():
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def _tag_file_names(staged: Path, version: str) -> None:
    # Every version's files get names of their own. A reader that listed the folder just
    # before a swap then opens names the new version lacks and fails (and retries), where
    # shared names such as part-0.parquet would hand it a mix of two versions' rows.
    for directory, _dirs, files in os.walk(staged):
        for name in files:
            if not name.startswith(("_", ".", version)):
                os.rename(Path(directory) / name, Path(directory) / f"{version}-{name}")


def _swap(target: OutputTarget, entry: Path) -> None:
    path = Path(target.path)
    swap = path.with_name(f".{path.name}.semray-swap-{entry.name}")
    if os.path.lexists(swap):
        swap.unlink()
    if target.kind == "file":
        os.link(entry, swap)
    else:
        # Relative, so the output and its sidecar can move together.
        os.symlink(os.path.relpath(entry, path.parent), swap)
    os.replace(swap, path)
    fsync_directory(path.parent)


def _remove_old_versions(target: OutputTarget, versions: Path, current: str, previous: str | None) -> None:
    """Remove superseded versions: at once for a file output (a reader holding the old file keeps
    its inode), after ``RETAIN_SUPERSEDED_S`` for a folder (a reader may still be listing it)."""
    now = time.time()
    ledger_path = sidecar(target) / "superseded.json"
    superseded: dict[str, float] = json.loads(ledger_path.read_text()) if ledger_path.exists() else {}
    if previous is not None:
        superseded.setdefault(previous, now)
    for entry in versions.iterdir():
        if entry.name == current:
            continue
        since = superseded.setdefault(entry.name, now)
        if target.kind == "folder" and not entry.name.startswith(".trash-") and now - since < RETAIN_SUPERSEDED_S:
            continue
        # Renamed away first, so a reader resolving the old path fails rather than seeing a half-deleted folder.
        trash = entry if entry.name.startswith(".trash-") else versions / f".trash-{entry.name}"
        os.replace(entry, trash)
        if trash.is_dir() and not trash.is_symlink():
            shutil.rmtree(trash)
        else:
            trash.unlink()
        superseded.pop(entry.name, None)
    present = {entry.name for entry in versions.iterdir()}
    kept = {name: since for name, since in superseded.items() if name in present}
    write_bytes_atomically(ledger_path, json.dumps(kept, sort_keys=True).encode())
    fsync_directory(versions)
