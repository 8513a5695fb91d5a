"""Whether a dataset's column holds a value: the check a re-filled word of a skill passes before use.

A skill re-filled for a question of other words may take a new word for one of its word parameters
(a category, a product, a label: ``skills.py``). Before the plan is rebound, the word must be a value
the parameter's column holds in the data, spelled as the data spells it: ``ColumnValues`` reads the
column through the same reader a Scan uses (``sources.open_source``), at most ``max_rows`` rows, once
per column, and answers case-insensitively with the stored spelling. A word the column does not hold
is no re-fill (the question is planned instead).

>>> values = ColumnValues(catalog)  # doctest: +SKIP
>>> values(("reviews",), "category", "garden")  # doctest: +SKIP
'Garden'
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from semray.errors import SemrayError
from semray.log import get_logger
from semray.planner.agents.catalog_view import CatalogView, DatasetProfile
from semray.sources import ROW_ID, open_source

log = get_logger(__name__)

MAX_ROWS = 200_000
"""Rows of a column read to know its values (a value past them is not found: the question is planned)."""
BATCH_ROWS = 8192
ValueLookup = Callable[[Sequence[str], str, str], str | None]
"""(datasets, column, word) -> the value as the data spells it when one of the datasets' column holds it."""


class ColumnValues:
    """A ``ValueLookup`` over a catalog view: each (dataset, column) read once, at most ``max_rows`` rows."""

    def __init__(self, catalog: CatalogView, max_rows: int = MAX_ROWS) -> None:
        self.catalog = catalog
        self.max_rows = max_rows
        self._known: dict[tuple[str, str], dict[str, str]] = {}
        self._lock = threading.Lock()

    def __call__(self, datasets: Sequence[str], column: str, word: str) -> str | None:
        for name in datasets:
            values = self._values(name, column)
            if values is not None and word.strip().lower() in values:
                return values[word.strip().lower()]
        return None

    def _values(self, name: str, column: str) -> dict[str, str] | None:
        with self._lock:
            if (name, column) in self._known:
                return self._known[(name, column)]
        try:
            profile = self.catalog.describe(name)
        except SemrayError:
            return None
        if column not in {item.name for item in profile.columns}:
            return None
        values = _read(profile, column, self.max_rows)
        with self._lock:
            self._known[(name, column)] = values
        return values


def _read(profile: DatasetProfile, column: str, max_rows: int) -> dict[str, str]:
    """Lower-cased text of each value of the column -> its spelling, over the first ``max_rows`` rows."""
    values: dict[str, str] = {}
    for item in profile.columns:
        if item.name == column:
            for value in item.top_values:
                values.setdefault(value.lower(), value)
    for row in profile.samples:
        if row.get(column) is not None:
            values.setdefault(str(row[column]).lower(), str(row[column]))
    seen = 0
    try:
        source = open_source(profile.kind, profile.uri, dict(profile.options))
        for task in source.read_tasks([column], BATCH_ROWS):
            for batch in task():
                table = batch.drop_columns([ROW_ID]) if ROW_ID in batch.column_names else batch
                for value in table.column(column).to_pylist():
                    if value is not None:
                        values.setdefault(str(value).lower(), str(value))
                seen += table.num_rows
                if seen >= max_rows:
                    return values
    except SemrayError as error:  # an unreadable source: what the profile knows is all there is
        log.info("column_values_unread", dataset=profile.name, column=column, error=str(error)[:200])
    return values
