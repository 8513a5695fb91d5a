"""What the agents read from the catalog, as a narrow protocol over frozen values.

The profiling agent finds datasets by a query and describes them (schema, statistics, sample
rows, summary); the planning agents search document segments for domain knowledge; the memory
manager recalls and writes memories. ``semray.catalog`` (LanceDB) and ``SourceCatalog`` (files
profiled on the fly) both satisfy these protocols.

>>> profile = DatasetProfile(name="reviews", kind="csv", uri="reviews.csv",
...     columns=(ColumnProfile(name="rating", type="BIGINT"),))
>>> profile.schema().names
('rating',)

A profile from the LanceDB catalog carries the ``CatalogPin`` of the catalog version it was read at;
``source()`` is then a pinned Scan source, and the grammar validator pins every scan of the dataset
to it (a plan re-run after a later ingest reads what the agents looked at).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from semray.operators import Schema, SourceSpec
from semray.operators.relational import CatalogPin

OptionValue = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class ColumnProfile:
    """One column's type and statistics (None where unknown)."""

    name: str
    type: str
    nulls: int | None = None
    distinct: int | None = None
    minimum: str | None = None
    maximum: str | None = None
    top_values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DatasetProfile:
    """A catalogued dataset: how to read it, its columns, a few rows and a summary."""

    name: str
    kind: str
    uri: str
    columns: tuple[ColumnProfile, ...]
    options: tuple[tuple[str, OptionValue], ...] = ()
    row_count: int | None = None
    samples: tuple[dict[str, Any], ...] = ()
    summary: str = ""
    catalog: CatalogPin | None = None
    """The catalog dataset and version this profile was read at (None: a file profiled on the fly)."""

    def schema(self) -> Schema:
        return Schema.of(*((column.name, column.type) for column in self.columns))

    def source(self) -> SourceSpec:
        """The Scan source of this dataset, pinned to ``catalog`` when the profile came from the catalog."""
        kind: Any = self.kind
        return SourceSpec(kind=kind, path=self.uri, options=dict(self.options), catalog=self.catalog)

    def describe(self, samples: int = 3) -> str:
        """The text the agents read about this dataset (schema with statistics, sample rows)."""
        lines = [f"dataset {self.name}: {self.kind} at {self.uri}, {self.row_count or 'unknown'} rows"]
        if self.catalog is not None:
            lines[0] += f" (catalog version {self.catalog.version})"
        if self.summary:
            lines.append(f"  summary: {self.summary}")
        scan = {"kind": self.kind, "path": self.uri, "options": dict(self.options)}
        lines.append(f"  scan source: {json.dumps(scan)}")
        for column in self.columns:
            facts = [f"{column.name} {column.type}"]
            if column.minimum is not None:
                facts.append(f"min {column.minimum!r} max {column.maximum!r}")
            if column.distinct is not None:
                facts.append(f"~{column.distinct} distinct")
            if column.top_values:
                facts.append("e.g. " + ", ".join(repr(value) for value in column.top_values[:3]))
            lines.append("  - " + "; ".join(facts))
        for row in self.samples[:samples]:
            lines.append("  sample: " + json.dumps(row, default=str)[:400])
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class DatasetHit:
    """A dataset a search found, best first."""

    name: str
    score: float
    summary: str = ""


@dataclass(frozen=True, slots=True)
class SegmentHit:
    """A document segment a search found (a manual's section, a codebook entry)."""

    dataset: str
    text: str
    score: float
    path: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One memory: what was learnt about a task, of a category, until it expires (None: kept)."""

    memory_id: str
    task: str
    memory: str
    category: str
    created: datetime
    expires: datetime | None = None
    hits: int = 0
    source_run: str | None = None
    tags: tuple[str, ...] = field(default=())


class CatalogView(Protocol):
    """The catalog as the profiling and planning agents read it."""

    def find_datasets(self, query: str, limit: int = 8) -> Sequence[DatasetHit]: ...

    def describe(self, name: str) -> DatasetProfile: ...

    def search_segments(self, query: str, limit: int = 5) -> Sequence[SegmentHit]: ...


class MemoryView(Protocol):
    """Long-term memory as the memory manager uses it."""

    def recall(self, task: str, limit: int = 5, category: str | None = None) -> Sequence[MemoryRecord]: ...

    def remember(
        self, task: str, memory: str, category: str, expires: datetime | None = None, source_run: str | None = None
    ) -> MemoryRecord: ...

    def forget(self, memory_id: str) -> None: ...

    def expire(self, now: datetime | None = None) -> int: ...
