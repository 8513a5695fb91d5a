"""Reading a request: which task its instruction asks for, and which answer format it wants.

Both look only at the instruction — the prompt's words that are not part of a matched document —
and at ``response_format``. A task scores one point per keyword word found (phrases count their
length), plus one per JSON-schema property naming one of its fields or its label column, plus a
half point for generic cues of its kind ("yes or no" for filters, "extract" for extraction, ...).
The best score wins; ties go to the task listed first in the config.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from semray.serving.simulator.config import LabelTaskKind, TaskSpec
from semray.serving.simulator.matching import normalize_words
from semray.serving.simulator.protocol import ResponseFormat

_KIND_CUES: Mapping[LabelTaskKind, tuple[str, ...]] = {
    "filter": ("yes or no", "true or false", "whether"),
    "label": ("classify", "category", "one of", "label", "which class"),
    "score": ("score", "rate", "rating", "scale"),
    "extract": ("extract", "fields", "json"),
    "pair": ("both", "same", "two", "pair", "match"),
    "free_text": ("summarize", "summary", "describe", "answer the question"),
    "aggregate": ("how many", "count", "counts", "most common", "records"),
}
_REASONING_CUES = ("step by step", "reasoning", "reason", "think", "explain", "explanation", "rationale")
_BOOLEAN_PAIR = re.compile(r"\b(yes\W{0,2}(?:or|/)\W{0,2}no|true\W{0,2}(?:or|/)\W{0,2}false)\b", re.IGNORECASE)
_MARKER = re.compile(r"((?:final\s+)?answer)\s*:", re.IGNORECASE)

Style = Literal["bare", "json", "reasoning"]


def _phrase(text: str) -> str:
    return " ".join(normalize_words(text))


def _contains(haystack: str, phrase: str) -> bool:
    return bool(phrase) and f" {phrase} " in haystack


def normalize_name(name: str) -> str:
    """A field or label name compared loosely: ``"Buyer City"`` and ``"buyer_city"`` agree."""
    return "".join(normalize_words(name))


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """How to write the answer: bare value, JSON (requested fields), or reasoning then a marker."""

    style: Style = "bare"
    fields: tuple[str, ...] = ()
    field_types: Mapping[str, str] = field(default_factory=dict)
    enums: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    marker: str = "Answer:"
    boolean_words: tuple[str, str] = ("Yes", "No")


def detect_format(response_format: ResponseFormat | None, instruction: Sequence[str], prompt: str) -> OutputFormat:
    """The answer format a request asks for.

    >>> detect_format(None, ["think", "step", "by", "step"], "... Final Answer: <yes/no>").style
    'reasoning'
    """
    text = f" {' '.join(instruction)} "
    boolean_words = _boolean_words(prompt)
    if response_format is not None and response_format.type in ("json_object", "json_schema"):
        schema = response_format.json_schema.schema_ if response_format.json_schema else None
        properties: Mapping[str, Any] = (schema or {}).get("properties") or {}
        return OutputFormat(
            style="json",
            fields=tuple(properties),
            field_types={
                name: str(spec.get("type", "")) for name, spec in properties.items() if isinstance(spec, dict)
            },
            enums={
                name: tuple(spec["enum"])
                for name, spec in properties.items()
                if isinstance(spec, dict) and isinstance(spec.get("enum"), list)
            },
            boolean_words=boolean_words,
        )
    if any(_contains(text, cue) for cue in _REASONING_CUES):
        markers = _MARKER.findall(prompt)
        marker = f"{markers[-1]}:" if markers else "Answer:"
        return OutputFormat(style="reasoning", marker=marker, boolean_words=boolean_words)
    return OutputFormat(style="bare", boolean_words=boolean_words)


def _boolean_words(prompt: str) -> tuple[str, str]:
    """``Yes``/``No`` unless the prompt names ``true or false``; all capitals when the prompt uses them.

    >>> _boolean_words("Reply TRUE or FALSE.")
    ('TRUE', 'FALSE')
    """
    found = _BOOLEAN_PAIR.findall(prompt)
    if not found:
        return ("Yes", "No")
    words = re.findall(r"[A-Za-z]+", found[-1])
    positive, negative = words[0], words[-1]
    if positive.isupper() and negative.isupper():
        return (positive, negative)
    return (positive.capitalize(), negative.capitalize())


@dataclass(frozen=True, slots=True)
class TaskClassifier:
    """Scores every configured task against an instruction and picks the best."""

    tasks: tuple[TaskSpec, ...]
    _keywords: Mapping[str, tuple[str, ...]] = field(init=False)

    def __post_init__(self) -> None:
        keywords = {task.name: tuple(_phrase(keyword) for keyword in task.keywords) for task in self.tasks}
        object.__setattr__(self, "_keywords", keywords)

    def score(self, task: TaskSpec, instruction: str, schema_fields: Collection[str]) -> float:
        points = float(sum(len(kw.split()) for kw in self._keywords[task.name] if _contains(instruction, kw)))
        names = {normalize_name(name) for name in (*task.fields, task.label_column or "") if name}
        points += sum(1 for name in schema_fields if normalize_name(name) in names)
        if any(_contains(instruction, _phrase(cue)) for cue in _KIND_CUES[task.kind]):
            points += 0.5
        return points

    def classify(
        self, instruction: Sequence[str], schema_fields: Collection[str], datasets: Collection[str], rows: int
    ) -> TaskSpec | None:
        """The task the instruction asks for among those over ``datasets`` (all when no row matched)."""
        candidates = [task for task in self.tasks if not datasets or self._covers(task, datasets, rows)]
        if not candidates:
            return None
        text = f" {' '.join(instruction)} "
        scored = [(self.score(task, text, schema_fields), -order, task) for order, task in enumerate(candidates)]
        best_score, _, best = max(scored, key=lambda item: (item[0], item[1]))
        if best_score > 0 or len(candidates) == 1:
            return best
        return None

    @staticmethod
    def _covers(task: TaskSpec, datasets: Collection[str], rows: int) -> bool:
        if task.kind == "pair":
            return rows >= 2 and task.dataset in datasets and (task.right_dataset or task.dataset) in datasets
        return task.dataset in datasets
