"""A folder (searched recursively) or one file: tabular files are datasets, documents one more.

Every csv/tsv, json/jsonl and parquet file is a dataset of its own, named after its path in the
folder (``reports/q3.csv`` of server ``shop`` -> ``shop_reports_q3``); every text, markdown,
html and pdf file is a row of one ``documents`` dataset named after the server. Other files,
symbolic links (never followed: the target may be outside the folder, or a file listed twice),
names starting with ``.`` and files that cannot be read are recorded as skipped, with the reason.
A tabular file that fails to profile (corrupt, undecodable, no rows) is skipped the same way.

>>> FolderServer.accepts("data/")  # doctest: +SKIP
True
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semray.catalog.schema_inference import open_and_profile
from semray.catalog.servers.base import (
    DocumentFile,
    FileState,
    ProfiledTable,
    ServerProfile,
    hash_file,
    normalise_name,
)
from semray.errors import CatalogError, SourceError
from semray.log import get_logger
from semray.operators import SourceSpec

log = get_logger(__name__)

TABULAR_KINDS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
}


def document_suffixes() -> frozenset[str]:
    from semray.sources.documents import DOCUMENT_SUFFIXES

    return DOCUMENT_SUFFIXES


@dataclass(frozen=True, slots=True)
class FolderServer:
    """A folder of files (or a single file), e.g. ``FolderServer("/data/shop")``."""

    uri: str
    kind: str = "folder"

    @classmethod
    def accepts(cls, target: str) -> bool:
        path = Path(target).expanduser()
        return path.is_dir() or (path.is_file() and _suffix(path) in {*TABULAR_KINDS, *document_suffixes()})

    @property
    def root(self) -> Path:
        path = Path(self.uri)
        return path if path.is_dir() else path.parent

    def profile(self, previous: Mapping[str, str]) -> ServerProfile:
        documents_suffixes = document_suffixes()
        single = Path(self.uri).is_file()
        # sorted by parts, the order of Path comparison, without its per-comparison cost
        candidates = [Path(self.uri)] if single else sorted(_walk(Path(self.uri)), key=_parts)
        tables: list[ProfiledTable] = []
        unchanged_tables: list[str] = []
        documents: list[DocumentFile] = []
        unchanged_documents: list[str] = []
        files: list[FileState] = []
        found: Counter[str] = Counter()
        tabular = [path for path in candidates if _suffix(path) in TABULAR_KINDS]
        # a single file is the server's only dataset: it takes the server's name
        suffixes = {path: "" for path in tabular} if single else _table_suffixes(tabular, self.root)
        root_prefix = _prefix_of(self.root)
        for path in candidates:
            location = str(path)
            relative = (
                location[len(root_prefix) :]
                if location.startswith(root_prefix)
                else path.relative_to(self.root).as_posix()
            )
            suffix = _suffix(path)
            found[suffix or "(no extension)"] += 1
            # one lstat per file: whether it is read (not a link, a regular file) and its size
            try:
                status = os.lstat(location)
            except OSError as error:
                files.append(FileState(relative, "", 0, "skipped", f"unreadable: {error.strerror or error}"))
                continue
            problem = _unreadable(path, status)
            if problem is not None:
                files.append(FileState(relative, "", status.st_size, "skipped", problem))
                continue
            try:
                content_hash = hash_file(location)
            except OSError as error:
                files.append(
                    FileState(relative, "", status.st_size, "skipped", f"unreadable: {error.strerror or error}")
                )
                continue
            size = status.st_size
            if suffix in TABULAR_KINDS:
                name = suffixes[path]
                if previous.get(relative) == content_hash:
                    unchanged_tables.append(name)
                    continue
                profiled = self._profile_table(path, TABULAR_KINDS[suffix], name, content_hash)
                if isinstance(profiled, str):
                    files.append(FileState(relative, content_hash, size, "skipped", profiled, dataset_suffix=name))
                else:
                    tables.append(profiled)
                    files.append(
                        FileState(relative, content_hash, size, "read", None, profiled.encoding, dataset_suffix=name)
                    )
            elif suffix in documents_suffixes:
                if previous.get(relative) == content_hash:
                    unchanged_documents.append(relative)
                else:
                    documents.append(DocumentFile(location, relative, content_hash, size))
            else:
                files.append(FileState(relative, content_hash, size, "skipped", f"unsupported file type {suffix!r}"))
        return ServerProfile(
            tables=tuple(tables),
            unchanged_tables=tuple(unchanged_tables),
            documents=tuple(documents),
            unchanged_documents=tuple(unchanged_documents),
            files=tuple(files),
            has_documents=bool(documents or unchanged_documents),
            found=dict(found),
        )

    def _profile_table(self, path: Path, kind: str, name: str, content_hash: str) -> ProfiledTable | str:
        """The profiled table, or why the file was skipped."""
        options: dict[str, Any] = {"delimiter": "\t"} if _suffix(path) == ".tsv" else {}
        try:
            opened, profile = open_and_profile(kind, path, options)
        except SourceError as error:
            log.warning("catalog_file_skipped", path=str(path), reason=str(error))
            return f"unreadable {kind}: {error}"
        return ProfiledTable(
            suffix=name,
            kind=kind,
            uri=str(path),
            options=opened.options,
            profile=profile,
            schema_status=opened.schema_status,
            content_hash=content_hash,
            sample_lines=opened.sample_lines,
            encoding=opened.encoding,
        )

    def scan(self, kind: str, uri: str, options: Mapping[str, Any]) -> SourceSpec:
        if kind == "documents":
            # the documents' extracted text, written by the ingest beside the catalog (one row per document)
            return SourceSpec(kind="parquet", path=uri, options={})
        if kind not in ("csv", "json", "parquet"):
            raise CatalogError(f"a folder server has no {kind!r} datasets; re-add it with `semray catalog add`")
        return SourceSpec.model_validate({"kind": kind, "path": uri, "options": dict(options)})


def _walk(root: Path) -> list[Path]:
    """Every entry below ``root`` that is not a folder, without following links (a linked folder is one entry)."""
    found: list[Path] = []
    for directory, folders, names in os.walk(root, followlinks=False):
        base = Path(directory)
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        found.extend(base / name for name in folders if (base / name).is_symlink())
        found.extend(base / name for name in names)
    return found


def _unreadable(path: Path, status: os.stat_result) -> str | None:
    """Why ``path`` (whose ``os.lstat`` is ``status``) is not read, or None when it is a readable regular file."""
    if path.name.startswith("."):
        return "hidden file (name starts with '.')"
    if stat.S_ISLNK(status.st_mode):
        return "symbolic link: not followed (catalogue its target by its own path)"
    if not stat.S_ISREG(status.st_mode):
        return "not a regular file (a pipe, socket or device)"
    if not os.access(path, os.R_OK):
        return "unreadable: permission denied"
    return None


def _prefix_of(root: Path) -> str:
    """``root`` as the string every path below it starts with (its relative path follows)."""
    text = str(root)
    return text if text.endswith("/") else text + "/"


def _parts(path: Path) -> tuple[str, ...]:
    return path.parts


def _suffix(path: Path) -> str:
    return path.suffix.lower()


def _table_suffixes(paths: list[Path], root: Path) -> dict[Path, str]:
    """Each tabular file's name within the server: its path without extension, or with it when two clash."""
    plain = {path: normalise_name(path.relative_to(root).with_suffix("").as_posix()) for path in paths}
    counts = Counter(plain.values())
    return {
        path: name if counts[name] == 1 else normalise_name(path.relative_to(root).as_posix())
        for path, name in plain.items()
    }
