"""fsync helpers: a write is durable once its bytes and its directory entry are on disk."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from semray.transactions.errors import RunInUseError


def fsync_directory(path: Path) -> None:
    """Persist the entries of ``path`` (a created, renamed or removed child)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (and ``root`` itself), deepest first."""
    if root.is_file():
        fsync_file(root)
        return
    for directory, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            fsync_file(Path(directory) / name)
        fsync_directory(Path(directory))


def make_directory_durably(path: Path) -> None:
    """``mkdir -p`` that fsyncs each parent whose entries it changed."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir()
        fsync_directory(directory.parent)


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary sibling, fsync it, rename it over ``path``, fsync the folder."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    fsync_directory(path.parent)


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str, wait_s: float = 2.0) -> Iterator[int]:
    """Hold ``flock(LOCK_EX)`` on ``path`` (created if needed), waiting at most ``wait_s``.

    flock rather than an O_EXCL lock file: the kernel drops it when the holder dies,
    even by SIGKILL, so a crashed process never leaves a stale lock behind.
    """
    fd = acquire_lock(path, what, wait_s)
    try:
        yield fd
    finally:
        release_lock(fd)


def acquire_lock(path: Path, what: str, wait_s: float = 2.0) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise RunInUseError(f"{what} is held by another live process; wait for it or cancel it") from None
            # A prober holds the lock for microseconds; poll briefly rather than block forever.
            time.sleep(0.01)


def release_lock(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def is_locked(path: Path) -> bool:
    """True when a live process holds ``flock`` on ``path`` (probed with a shared, non-blocking lock)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's lock
    return False
