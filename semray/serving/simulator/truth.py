"""Ground truth: each dataset's documents and labels, and the true answer to a task.

Row ids are ``"<dataset>:<key>"`` with the key rendered by ``str`` (so ``7`` and ``"7"`` agree).

>>> store = LabelStore.build(config)  # doctest: +SKIP
>>> store.true_answer(task, [RowRef("symptoms", 3)])  # doctest: +SKIP
'migraine'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from semray.serving.simulator.config import DatasetSpec, SimulatorConfig, TaskSpec
from semray.serving.simulator.errors import SimulatorConfigError

_TRUTHY = frozenset({"true", "1", "yes", "y", "t"})

Answer = bool | str | float | int | dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class RowRef:
    """One row of one dataset, by position in the store."""

    dataset: str
    index: int


@dataclass(frozen=True, slots=True)
class DatasetRows:
    """A loaded dataset: keys, document texts per text column, and label columns as Python lists."""

    name: str
    keys: tuple[str, ...]
    texts: Mapping[str, tuple[str | None, ...]]
    labels: Mapping[str, tuple[Any, ...]]
    _distinct: dict[str, tuple[Any, ...]] = field(default_factory=dict, compare=False)

    def row_id(self, index: int) -> str:
        return f"{self.name}:{self.keys[index]}"

    def column(self, column: str) -> tuple[Any, ...]:
        try:
            return self.labels[column]
        except KeyError:
            raise SimulatorConfigError(
                f"dataset {self.name!r} has no label column {column!r} (columns: {', '.join(self.labels)})"
            ) from None

    def distinct(self, column: str) -> tuple[Any, ...]:
        """The column's non-null values, deduplicated and sorted by their text (cached)."""
        if column not in self._distinct:
            values = {str(value): value for value in self.column(column) if value is not None}
            self._distinct[column] = tuple(values[text] for text in sorted(values))
        return self._distinct[column]


def _read_table(path: Path) -> pa.Table:
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return pa_csv.read_csv(path)
        if suffix == ".parquet":
            return pq.read_table(path)
        if suffix in (".json", ".jsonl", ".ndjson"):
            return pa_json.read_json(path)
    except (OSError, pa.ArrowInvalid) as error:
        raise SimulatorConfigError(f"cannot read dataset file {path}: {error}") from error
    raise SimulatorConfigError(f"dataset file {path} must be .csv, .parquet, .json or .jsonl")


def _require_columns(table: pa.Table, columns: Sequence[str], what: str) -> None:
    missing = [column for column in columns if column not in table.column_names]
    if missing:
        raise SimulatorConfigError(
            f"{what} lacks column(s) {', '.join(missing)} (has: {', '.join(table.column_names)})"
        )


def load_dataset(name: str, spec: DatasetSpec) -> DatasetRows:
    """Read (and join) a dataset's documents and labels into a ``DatasetRows``."""
    documents = spec.table if spec.table is not None else _read_table(spec.path)  # type: ignore[arg-type]
    _require_columns(documents, (spec.key_column, *spec.text_columns), f"dataset {name!r}")
    labels = spec.labels_table if spec.labels_table is not None else None
    if spec.labels_path is not None:
        labels = _read_table(spec.labels_path)
    if labels is not None:
        documents = _join_labels(name, spec, documents, labels)
    keys = tuple(str(key) for key in documents.column(spec.key_column).to_pylist())
    if len(set(keys)) != len(keys):
        raise SimulatorConfigError(f"dataset {name!r}: key column {spec.key_column!r} has repeated values")
    texts = {column: tuple(documents.column(column).to_pylist()) for column in spec.text_columns}
    label_columns = {column: tuple(documents.column(column).to_pylist()) for column in documents.column_names}
    return DatasetRows(name=name, keys=keys, texts=texts, labels=label_columns)


def _join_labels(name: str, spec: DatasetSpec, documents: pa.Table, labels: pa.Table) -> pa.Table:
    """Left-join label columns onto documents; label columns the documents already have are kept as is."""
    join_column = spec.join_column or spec.key_column
    label_key = spec.labels_key_column or join_column
    _require_columns(documents, (join_column,), f"dataset {name!r}")
    _require_columns(labels, (label_key,), f"labels of dataset {name!r}")
    extra = [c for c in labels.column_names if c != label_key and c not in documents.column_names]
    labels = labels.select([label_key, *extra]).rename_columns([join_column, *extra])
    if labels.schema.field(join_column).type != documents.schema.field(join_column).type:
        # Keys typed differently on the two sides (int vs text) are compared as text.
        labels = labels.set_column(0, join_column, labels.column(0).cast(pa.string()))
        position = documents.column_names.index(join_column)
        documents = documents.set_column(position, join_column, documents.column(join_column).cast(pa.string()))
    order = documents.append_column("__order", pa.array(range(documents.num_rows), pa.int64()))
    joined = order.join(labels, keys=join_column, join_type="left outer")
    return joined.sort_by("__order").drop_columns(["__order"])


@dataclass(frozen=True, slots=True)
class LabelStore:
    """All datasets of a config, and the true answers of its tasks."""

    datasets: Mapping[str, DatasetRows]

    @classmethod
    def build(cls, config: SimulatorConfig) -> LabelStore:
        store = cls({name: load_dataset(name, spec) for name, spec in config.datasets.items()})
        for task in config.tasks:
            store.check_task(task)
        return store

    def check_task(self, task: TaskSpec) -> None:
        """Fail early, with the column list, when a task names a column its dataset lacks."""
        rows = self.datasets[task.dataset or ""]
        for column in (task.label_column, *task.fields.values()):
            if column is not None:
                rows.column(column)
        if task.kind == "pair":
            right = self.datasets[task.right_dataset or task.dataset or ""]
            right.column(task.right_label_column or task.label_column or "")

    def row_id(self, row: RowRef) -> str:
        return self.datasets[row.dataset].row_id(row.index)

    def value(self, row: RowRef, column: str) -> Any:
        return self.datasets[row.dataset].column(column)[row.index]

    def choices(self, task: TaskSpec) -> tuple[str, ...]:
        """Label choices: the task's own, else the label column's distinct values."""
        if task.choices:
            return task.choices
        if task.label_column is None:
            return ()
        return tuple(str(value) for value in self.datasets[task.dataset or ""].distinct(task.label_column))

    def distinct(self, task: TaskSpec, column: str) -> tuple[Any, ...]:
        return self.datasets[task.dataset or ""].distinct(column)

    def true_answer(self, task: TaskSpec, rows: Sequence[RowRef]) -> Answer:
        """The correct answer of ``task`` about ``rows`` (one row; two for ``pair``)."""
        first = rows[0]
        if task.kind == "pair":
            return self._pair_truth(task, first, rows[1])
        if task.kind == "extract":
            return {name: _plain(self.value(first, column)) for name, column in task.fields.items()}
        if task.label_column is None:  # free text without a label
            return None
        value = self.value(first, task.label_column)
        if task.kind == "filter":
            return _is_true(value, task.true_values)
        if task.kind == "score":
            return _as_number(value)
        return None if value is None else str(value)

    def _pair_truth(self, task: TaskSpec, left: RowRef, right: RowRef) -> bool:
        left_value = self.value(left, task.label_column or "")
        right_value = self.value(right, task.right_label_column or task.label_column or "")
        nulls = {_norm(value) for value in task.null_values}
        if left_value is None or right_value is None or _norm(left_value) in nulls or _norm(right_value) in nulls:
            return False
        if task.relation == "greater":
            return _greater(left_value, right_value)
        equal = _norm(left_value) == _norm(right_value)
        return equal if task.relation == "equal" else not equal


def _norm(value: Any) -> str:
    return str(value).strip().casefold()


def _greater(left: Any, right: Any) -> bool:
    """Numbers compare as numbers, anything else as case-folded text."""
    try:
        return float(left) > float(right)
    except (TypeError, ValueError):
        return _norm(left) > _norm(right)


def _is_true(value: Any, true_values: tuple[str, ...]) -> bool:
    if value is None:
        return False
    if true_values:
        return _norm(value) in {_norm(v) for v in true_values}
    if isinstance(value, bool):
        return value
    return _norm(value) in _TRUTHY


def _as_number(value: Any) -> float | int | None:
    if value is None:
        return None
    number = float(value)
    return int(number) if number.is_integer() else number


def _plain(value: Any) -> Any:
    """JSON-friendly label value (dates and decimals become text)."""
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)
