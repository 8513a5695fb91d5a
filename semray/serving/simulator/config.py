"""The simulator's configuration: models, datasets with their labels, and tasks.

A config is a frozen pydantic value, loadable from a JSON file (``SimulatorConfig.from_file``)
or built in-process from an Arrow table (``SimulatorConfig.from_labels``). Example file::

    {
      "seed": 7,
      "models": {"sim-small": {"error_rate": 0.2}, "sim-large": {"error_rate": 0.05}},
      "datasets": {"symptoms": {"path": "symptoms.csv", "key_column": "patient_id",
                                "text_columns": ["symptoms"], "labels_path": "labels.csv"}},
      "tasks": [{"name": "diagnosis", "kind": "label", "dataset": "symptoms",
                 "label_column": "text_diagnosis", "keywords": ["diagnosis", "classify"]}]
    }
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import NormalDist
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from semray.serving.simulator.errors import SimulatorConfigError

LabelTaskKind = Literal["filter", "label", "score", "extract", "pair", "free_text", "aggregate"]
"""What a configured task answers from its labels. The simulator's own config vocabulary, not
``semray.tasks.TaskKind``: it stands in for an external model and recognises a request by its
words (``understanding.py``), whichever operator sent it."""


class ConfidenceProfile(BaseModel):
    """How confident a model sounds when right vs wrong.

    The logit of the confidence is normal: ``N(correct_mean_logit, sigma)`` for correct answers and
    ``N(wrong_mean_logit, sigma)`` for wrong ones, with
    ``wrong_mean_logit = correct_mean_logit - sqrt(2) * sigma * Phi^-1(auroc)``, so that
    ``P(conf_correct > conf_wrong) = auroc``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    auroc: float = Field(default=0.8, ge=0.5, lt=1.0, description="AUROC of confidence for telling right from wrong")
    correct_mean_logit: float = Field(default=2.0, description="mean logit of confidence for correct answers")
    sigma: float = Field(default=1.0, gt=0.0, description="std of the confidence logit (both classes)")

    @property
    def mean_gap(self) -> float:
        """``sqrt(2) * sigma * Phi^-1(auroc)``: distance between the two logit means."""
        return math.sqrt(2.0) * self.sigma * NormalDist().inv_cdf(self.auroc)

    @property
    def wrong_mean_logit(self) -> float:
        return self.correct_mean_logit - self.mean_gap


class ModelProfile(BaseModel):
    """One simulated model: quality, confidence separability, limits, speed and prices."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    error_rate: float = Field(default=0.1, ge=0.0, le=1.0, description="share of questions answered wrong")
    confidence: ConfidenceProfile = Field(default_factory=ConfidenceProfile)
    context_length: int = Field(default=8192, ge=1, description="max prompt + completion tokens")
    latency_base_s: float = Field(default=0.0, ge=0.0, description="seconds per call")
    latency_per_token_s: float = Field(default=0.0, ge=0.0, description="seconds per prompt + completion token")
    max_concurrency: int = Field(default=8, ge=1, description="calls served at once; the rest wait")
    price_in_per_million: float = Field(default=0.0, ge=0.0, description="$ per 1M prompt tokens")
    price_out_per_million: float = Field(default=0.0, ge=0.0, description="$ per 1M completion tokens")
    description: str = ""


class DatasetSpec(BaseModel):
    """A dataset's documents (the text prompts quote) and its labels, joined on ``key_column``.

    Documents come from ``path`` (csv, parquet, json/jsonl) or ``table`` (in-process Arrow);
    labels from the same table, or from ``labels_path``/``labels_table`` joined on the key.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    key_column: str
    text_columns: tuple[str, ...] = Field(min_length=1)
    path: Path | None = None
    labels_path: Path | None = None
    join_column: str | None = Field(
        default=None, description="documents column joined to the labels (default: key_column)"
    )
    labels_key_column: str | None = Field(default=None, description="labels column joined on (default: join_column)")
    table: pa.Table | None = Field(default=None, exclude=True)
    labels_table: pa.Table | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _has_documents(self) -> DatasetSpec:
        if (self.path is None) == (self.table is None):
            raise ValueError("give exactly one of 'path' (a csv/parquet/json file) or 'table' (an Arrow table)")
        if self.labels_path is not None and self.labels_table is not None:
            raise ValueError("give at most one of 'labels_path' and 'labels_table'")
        return self


class TaskSpec(BaseModel):
    """A question the simulator can answer, recognised from the instruction by its keywords.

    - ``filter``: true iff the label is in ``true_values`` (or is truthy when none are given).
    - ``label``: the label; wrong answers pick another of ``choices`` (default: the column's values).
    - ``score``: the numeric label within ``score_range``; wrong answers shift by ``score_error_shift``.
    - ``extract``: ``fields`` maps output field name -> label column; wrong answers corrupt one field.
    - ``pair``: two rows; true iff their labels relate by ``relation`` (neither in ``null_values``).
    - ``free_text``: the label text (or a fixed sentence without a label column).
    - ``aggregate``: over every quoted row (and ``value: count`` lines of partial answers in the
      prompt): the count of each label (``statistic="counts"``) or the most common one.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    kind: LabelTaskKind
    dataset: str | None = Field(default=None, description="default: the config's only dataset")
    label_column: str | None = None
    keywords: tuple[str, ...] = Field(default=(), description="phrases that identify the task in an instruction")
    choices: tuple[str, ...] = ()
    true_values: tuple[str, ...] = ()
    score_range: tuple[float, float] = (1.0, 5.0)
    score_error_shift: float = Field(default=1.0, gt=0.0)
    fields: dict[str, str] = Field(default_factory=dict)
    right_dataset: str | None = Field(default=None, description="pair: dataset of the second row (default: dataset)")
    right_label_column: str | None = Field(default=None, description="pair: label column of the second row")
    relation: Literal["equal", "not_equal", "greater"] = Field(
        default="equal", description="pair: labels equal, differ, or the first's number exceeds the second's"
    )
    null_values: tuple[str, ...] = Field(default=(), description="pair: label values that never relate")
    statistic: Literal["counts", "most_common"] = Field(
        default="counts", description="aggregate: 'value: count' lines, or the most common value"
    )

    @model_validator(mode="after")
    def _check_kind(self) -> TaskSpec:
        if self.kind == "extract" and not self.fields:
            raise ValueError(f"extract task {self.name!r} needs 'fields' (output field -> label column)")
        if self.kind in ("filter", "label", "score", "pair", "aggregate") and self.label_column is None:
            raise ValueError(f"{self.kind} task {self.name!r} needs 'label_column'")
        low, high = self.score_range
        if low >= high:
            raise ValueError(f"score task {self.name!r}: score_range must be (low, high) with low < high")
        return self


class MatchingConfig(BaseModel):
    """How prompt text is matched to documents (hashed word shingles that vote)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shingle_words: int = Field(default=5, ge=1, description="words per shingle")
    min_shingles: int = Field(default=3, ge=1, description="fewest matching shingles to accept a document")
    min_coverage: float = Field(default=0.2, gt=0.0, le=1.0, description="share of a document's shingles needed")
    strong_shingles: int = Field(default=25, ge=1, description="this many matching shingles suffice on their own")
    max_document_frequency: int = Field(default=64, ge=1, description="shingles in more documents are ignored")


def _default_models() -> dict[str, ModelProfile]:
    return {
        "sim-small": ModelProfile(
            error_rate=0.15,
            latency_base_s=0.0,
            price_in_per_million=0.1,
            price_out_per_million=0.4,
            description="cheap, less accurate simulated model",
        ),
        "sim-large": ModelProfile(
            error_rate=0.05,
            latency_base_s=0.0,
            price_in_per_million=2.5,
            price_out_per_million=10.0,
            description="expensive, more accurate simulated model",
        ),
    }


class SimulatorConfig(BaseModel):
    """Everything the simulator needs; e.g. ``SimulatorConfig.from_file(Path("sim.json"))``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = 0
    models: dict[str, ModelProfile] = Field(default_factory=_default_models)
    datasets: dict[str, DatasetSpec] = Field(default_factory=dict)
    tasks: tuple[TaskSpec, ...] = ()
    matching: MatchingConfig = Field(default_factory=MatchingConfig)
    unlabelled: Literal["error", "answer"] = Field(
        default="error",
        description="a prompt without a label (no row matched, no task, a null label): error answers it with "
        "NoLabelError (per-row code no_label, HTTP 422, nothing charged); answer gives the old fixed, uninformed "
        "answer, charged like any call",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_task_dataset(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "tasks" not in data:
            return data
        datasets = data.get("datasets") or {}
        if len(datasets) != 1:
            return data
        (only,) = datasets
        tasks = []
        for task in data["tasks"]:
            if isinstance(task, TaskSpec) and task.dataset is None:
                task = task.model_copy(update={"dataset": only})
            elif isinstance(task, dict) and task.get("dataset") is None:
                task = {**task, "dataset": only}
            tasks.append(task)
        return {**data, "tasks": tuple(tasks)}

    @model_validator(mode="after")
    def _check_references(self) -> SimulatorConfig:
        if not self.models:
            raise ValueError("a simulator config needs at least one model")
        names = [task.name for task in self.tasks]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"task names must be unique; repeated: {', '.join(duplicates)}")
        for task in self.tasks:
            for dataset in (task.dataset, task.right_dataset):
                if dataset is not None and dataset not in self.datasets:
                    raise ValueError(
                        f"task {task.name!r} names dataset {dataset!r}; datasets: {', '.join(self.datasets) or 'none'}"
                    )
            if task.dataset is None:
                raise ValueError(f"task {task.name!r} needs 'dataset' when the config has several datasets")
        return self

    @classmethod
    def from_file(cls, path: Path) -> SimulatorConfig:
        """Load a JSON config; relative data paths resolve against the file's folder."""
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise SimulatorConfigError(f"cannot read simulator config {path}: {error}") from error
        for spec in (raw.get("datasets") or {}).values():
            for key in ("path", "labels_path"):
                if isinstance(spec, dict) and spec.get(key) and not Path(spec[key]).is_absolute():
                    spec[key] = str(path.parent / spec[key])
        return cls.from_mapping(raw, source=str(path))

    def save(self, path: Path) -> Path:
        """Write this config as JSON; in-process tables go to Parquet files beside it.

        >>> SimulatorConfig.from_labels(table, ...).save(Path("sim.json"))  # doctest: +SKIP
        """
        import pyarrow.parquet as pq

        path.parent.mkdir(parents=True, exist_ok=True)
        raw = self.model_dump(mode="json")
        for name, spec in self.datasets.items():
            for attribute, key in (("table", "path"), ("labels_table", "labels_path")):
                table = getattr(spec, attribute)
                if table is not None:
                    file_name = f"{path.stem}-{name}-{attribute}.parquet"
                    pq.write_table(table, path.parent / file_name)
                    raw["datasets"][name][key] = file_name
        path.write_text(json.dumps(raw, indent=2), encoding="utf-8")
        return path

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], source: str = "mapping") -> SimulatorConfig:
        try:
            return cls.model_validate(dict(raw))
        except ValidationError as error:
            raise SimulatorConfigError(f"invalid simulator config ({source}): {error}") from error

    @classmethod
    def from_labels(
        cls,
        table: pa.Table,
        *,
        key_column: str,
        text_columns: Sequence[str],
        tasks: Sequence[TaskSpec],
        dataset: str = "default",
        models: Mapping[str, ModelProfile] | None = None,
        seed: int = 0,
        matching: MatchingConfig | None = None,
    ) -> SimulatorConfig:
        """One-line config over an in-process Arrow table of (key, text, label columns).

        >>> SimulatorConfig.from_labels(table, key_column="id", text_columns=["review"],
        ...     tasks=[TaskSpec(name="positive", kind="filter", label_column="is_positive",
        ...                     keywords=("positive",))])  # doctest: +SKIP
        """
        spec = DatasetSpec(key_column=key_column, text_columns=tuple(text_columns), table=table)
        data: dict[str, Any] = {
            "seed": seed,
            "datasets": {dataset: spec},
            "tasks": tuple(tasks),
            "matching": matching or MatchingConfig(),
        }
        if models is not None:
            data["models"] = dict(models)
        return cls.from_mapping(data, source="from_labels")
