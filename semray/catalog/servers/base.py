"""What a data server gives the catalog: the profiles of its tables, its documents, the files it looked at.

A data server is something a user registers (``semray catalog add PATH|URI``): a folder, a SQLite
or DuckDB file, a Postgres database. Its ``profile(previous)`` hashes what it holds, profiles the
tables whose content changed since ``previous`` (content hashes from the ``files`` table) and
lists the documents to (re)read; its ``scan(record)`` gives the ``SourceSpec`` a plan's Scan
reads a catalogued dataset with.

>>> dataset_name("shop", "orders 2024")
'shop_orders_2024'
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from semray.catalog.profiling import TableProfile
from semray.operators import SourceSpec
from semray.sources.base import OptionValue

HASH_CHUNK = 1 << 20
"""Files are hashed in chunks of this many bytes: a 1 GB file is never held in memory."""


@dataclass(frozen=True, slots=True)
class FileState:
    """A file an ingest looked at (a row of the ``files`` table, once its dataset is named)."""

    relative: str
    content_hash: str
    size: int
    status: Literal["read", "skipped"]
    reason: str | None = None
    encoding: str | None = None
    dataset_suffix: str | None = None
    """The dataset it belongs to, as ``dataset_name(server, suffix)``; None: the server's own entry."""


@dataclass(frozen=True, slots=True)
class ProfiledTable:
    """A tabular dataset of a server, profiled: ``suffix`` names it within the server ("" for its only one)."""

    suffix: str
    kind: str
    uri: str
    options: dict[str, OptionValue]
    profile: TableProfile
    schema_status: str
    content_hash: str
    sample_lines: tuple[str, ...] = ()
    """The first raw lines of a file whose schema was inferred, for a model to propose one."""
    encoding: str | None = None

    def spec(self) -> SourceSpec:
        return SourceSpec.model_validate({"kind": self.kind, "path": self.uri, "options": self.options})


@dataclass(frozen=True, slots=True)
class DocumentFile:
    """A document to read and segment: its absolute path, its path within the server, its hash."""

    path: str
    relative: str
    content_hash: str
    size: int


@dataclass(frozen=True, slots=True)
class ServerProfile:
    """What ``DataServer.profile`` found; tables and documents not listed as changed kept their hash."""

    tables: tuple[ProfiledTable, ...] = ()
    unchanged_tables: tuple[str, ...] = ()
    documents: tuple[DocumentFile, ...] = ()
    unchanged_documents: tuple[str, ...] = ()
    files: tuple[FileState, ...] = ()
    has_documents: bool = False
    """The server holds documents (changed or not): its documents dataset exists after this ingest."""
    found: Mapping[str, int] = field(default_factory=dict)
    """What was found, by kind (suffix), for the error when nothing is readable."""


class DataServer(Protocol):
    """One kind of data server; ``servers.SERVER_KINDS`` lists them."""

    @property
    def kind(self) -> str:
        """folder, sqlite, duckdb or postgres."""
        ...

    @property
    def uri(self) -> str:
        """The resolved path or URI the server was added with."""
        ...

    def profile(self, previous: Mapping[str, str]) -> ServerProfile:
        """Profile what changed since ``previous`` (relative path -> content hash of the last ingest)."""
        ...

    def scan(self, kind: str, uri: str, options: Mapping[str, Any]) -> SourceSpec:
        """The Scan source of one of this server's datasets (its row in the ``datasets`` table)."""
        ...


def dataset_name(server: str, suffix: str) -> str:
    """A dataset's name: the server's, then the part naming it within the server, as one SQL-friendly word."""
    return normalise_name(f"{server}_{suffix}" if suffix else server)


def normalise_name(text: str) -> str:
    """Lower case letters, digits and underscores, not starting with a digit.

    >>> normalise_name("Q3 Sales (final).csv")
    'q3_sales_final_csv'
    """
    name = re.sub(r"[^0-9a-z_]+", "_", text.lower()).strip("_") or "dataset"
    return f"d_{name}" if name[0].isdigit() else name


def hash_file(path: str | Path) -> str:
    """sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def combined_hash(parts: Mapping[str, str]) -> str:
    """One hash of several (name -> hash) parts, independent of their order."""
    return hashlib.sha256(json.dumps(sorted(parts.items())).encode()).hexdigest()
