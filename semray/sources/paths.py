"""Resolve a source path (a file, a folder or a glob) into a sorted, checked list of files.

Only regular files are read: a named pipe, device or socket (even one called ``x.csv``)
is refused before it is opened, since opening a pipe blocks until someone writes to it,
and readers open every file more than once. A symbolic link loop, a link to nothing, and
two paths to one file (through a link) are refused too, so no file is read twice.
"""

from __future__ import annotations

import errno
import glob
import gzip
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from semray.errors import SourceError, suggest

_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class FileSet:
    """The files of a source, e.g. ``FileSet(root=Path("data"), files=(...), multi=True)``.

    ``multi`` is True when the path named a folder or a glob: row ids then carry each
    file's path relative to ``root``, so they stay stable when files are added.
    """

    path: str
    root: Path
    files: tuple[Path, ...]
    multi: bool

    def relative(self, file: Path) -> str:
        return file.relative_to(self.root).as_posix() if self.multi else file.name

    def prefix(self, file: Path) -> str | None:
        """The relative path used in row ids, or None for a single-file source."""
        return self.relative(file) if self.multi else None


def has_glob(path: str) -> bool:
    return any(char in path for char in _GLOB_CHARS)


def resolve_files(path: str | None, kind: str, extensions: Sequence[str], pattern: str | None = None) -> FileSet:
    """The files a ``kind`` source reads, sorted by relative path.

    A folder is searched recursively for ``extensions`` (or ``pattern``, a glob relative
    to the folder); names starting with ``.`` or ``_`` (``_SUCCESS``, ``.DS_Store``) are
    skipped. Raises SourceError for a missing path, an unreadable file, or no match.
    """
    if not path:
        raise SourceError(f"a {kind} source needs a path (a file, a folder or a glob pattern)")
    if has_glob(path):
        root = _glob_root(path)
        matches = (Path(p) for p in glob.glob(path, recursive=True))
        files = sorted((p for p in matches if _is_data_file(p)), key=_sort_key(root))
        if not files:
            raise SourceError(f"no files match {path!r}; check the pattern and the folder {str(root)!r}")
        check_distinct(files)
        return FileSet(path=path, root=root, files=tuple(files), multi=True)
    target = Path(path).expanduser()
    mode = _mode(target, kind)
    if stat.S_ISDIR(mode):
        files = _list_folder(target, extensions, pattern)
        if not files:
            wanted = pattern or " or ".join(f"*{ext}" for ext in extensions)
            raise SourceError(f"folder {path!r} has no {wanted} files; point the {kind} source at a folder that does")
        check_distinct(files)
        return FileSet(path=path, root=target, files=tuple(files), multi=True)
    check_regular(target, mode)
    check_readable(target)
    return FileSet(path=path, root=target.parent, files=(target,), multi=False)


def check_distinct(files: Sequence[Path]) -> None:
    """Refuse two paths to the same file (a link into the folder, a link loop a glob followed)."""
    seen: dict[tuple[int, int], Path] = {}
    for file in files:
        info = file.stat()
        key = (info.st_dev, info.st_ino)
        if key in seen:
            raise SourceError(
                f"{str(seen[key])!r} and {str(file)!r} are the same file (through a symbolic link), so its rows "
                "would be read twice; remove the link or narrow the path or glob"
            )
        seen[key] = file


def open_raw(path: str) -> BinaryIO:
    """The file's bytes, decompressed when its name ends in ``.gz``; OS errors become SourceError."""
    try:
        if path.lower().endswith(".gz"):
            return gzip.open(path, "rb")  # type: ignore[return-value]
        return open(path, "rb")
    except PermissionError as error:
        raise SourceError(f"cannot read {path!r}: permission denied; check the file's permissions") from error
    except OSError as error:
        raise SourceError(f"cannot read {path!r}: {error.strerror or error}") from error


def check_readable(file: Path) -> None:
    """Open ``file`` once so permission problems surface with a clear message."""
    try:
        with file.open("rb"):
            pass
    except PermissionError as error:
        raise SourceError(f"cannot read {str(file)!r}: permission denied; check the file's permissions") from error
    except IsADirectoryError as error:
        raise SourceError(f"{str(file)!r} is a folder, not a file") from error
    except OSError as error:
        raise SourceError(f"cannot read {str(file)!r}: {error.strerror or error}") from error


def read_bytes(file: Path) -> bytes:
    """The whole file, with OS errors turned into SourceError."""
    try:
        return file.read_bytes()
    except PermissionError as error:
        raise SourceError(f"cannot read {str(file)!r}: permission denied; check the file's permissions") from error
    except OSError as error:
        raise SourceError(f"cannot read {str(file)!r}: {error.strerror or error}") from error


def _list_folder(folder: Path, extensions: Sequence[str], pattern: str | None) -> list[Path]:
    candidates = folder.glob(pattern) if pattern else folder.rglob("*")
    lowered = tuple(ext.lower() for ext in extensions)
    found = []
    for candidate in candidates:
        relative = candidate.relative_to(folder)
        if any(part.startswith((".", "_")) for part in relative.parts):
            continue
        if pattern is None and lowered and not candidate.name.lower().endswith(lowered):
            continue
        if _is_data_file(candidate):
            found.append(candidate)
    return sorted(found, key=_sort_key(folder))


def _sort_key(root: Path) -> Callable[[Path], str]:
    def key(file: Path) -> str:
        return file.relative_to(root).as_posix()

    return key


def _glob_root(pattern: str) -> Path:
    """The deepest folder of ``pattern`` before its first glob character."""
    parts = Path(pattern).parts
    fixed: list[str] = []
    for part in parts:
        if has_glob(part):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def _mode(target: Path, kind: str) -> int:
    """The file mode of ``target`` (links followed), or a SourceError that names why there is none."""
    return file_status(target, kind).st_mode


def file_status(target: Path, kind: str) -> os.stat_result:
    """``os.stat`` of ``target`` (links followed), or a SourceError that names why there is none (a missing
    file, a link loop, a dead link, a folder without permission)."""
    try:
        return os.stat(target)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise SourceError(
                f"{str(target)!r} is a symbolic link loop (a link that leads back to itself); fix or remove the link"
            ) from error
        if error.errno == errno.ENOENT and target.is_symlink():
            raise SourceError(
                f"{str(target)!r} is a symbolic link to {os.readlink(target)!r}, which does not exist; "
                "fix or remove the link"
            ) from error
        if error.errno == errno.ENOENT:
            raise SourceError(_missing_message(target, kind)) from error
        if error.errno == errno.EACCES:
            raise SourceError(
                f"cannot read {str(target)!r}: permission denied; check the permissions of its folders"
            ) from error
        raise SourceError(f"cannot read {str(target)!r}: {error.strerror or error}") from error


_SPECIAL = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def check_regular(target: Path, mode: int) -> None:
    """SourceError unless ``mode`` (of ``target``) is a regular file's, naming what it is instead."""
    if stat.S_ISREG(mode):
        return
    what = next((name for test, name in _SPECIAL if test(mode)), "not a regular file")
    raise SourceError(
        f"{str(target)!r} is {what}, not a regular file; semray reads only regular files "
        "(it opens each more than once), so copy the data into a file first"
    )


def _is_data_file(candidate: Path) -> bool:
    """True for a regular file, False for a folder; SourceError for anything else (pipe, loop, dead link)."""
    mode = _mode(candidate, "matched")
    if stat.S_ISDIR(mode):
        return False
    check_regular(candidate, mode)
    return True


def _missing_message(target: Path, kind: str) -> str:
    message = f"{kind} source {str(target)!r} does not exist"
    parent = target.parent if str(target.parent) else Path(".")
    if parent.is_dir():
        hint = suggest(target.name, os.listdir(parent))
        if hint:
            return f"{message}; did you mean {str(parent / hint)!r}?"
    return f"{message}; check the path"
