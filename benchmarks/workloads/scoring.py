"""Scoring functions: answers of any system against the labels, as plain numbers.

Every function takes plain Python values (ids, dicts of strings), so the scores of semray and
of the peers are computed by the same code from the JSON their runners print.

>>> precision_recall({"a", "b"}, {"b", "c"})
PrecisionRecall(precision=0.5, recall=0.5, f1=0.5, predicted=2, positives=2)
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PrecisionRecall:
    """Precision, recall and F1 of a predicted set against the true positives."""

    precision: float
    recall: float
    f1: float
    predicted: int
    positives: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def precision_recall(predicted: Collection[Any], positives: Collection[Any]) -> PrecisionRecall:
    """Set precision/recall; an empty prediction has precision 1 (it claims nothing false)."""
    hits = len(set(predicted) & set(positives))
    precision = hits / len(set(predicted)) if predicted else 1.0
    recall = hits / len(set(positives)) if positives else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return PrecisionRecall(
        round(precision, 4), round(recall, 4), round(f1, 4), len(set(predicted)), len(set(positives))
    )


def normalize_text(value: Any) -> str:
    """Case-, whitespace- and punctuation-insensitive form of an extracted value.

    >>> normalize_text("  Re: Raptor  UPDATE! ")
    're raptor update'
    """
    if value is None:
        return ""
    return " ".join(re.findall(r"[a-z0-9@._-]+", str(value).casefold())).strip(" .")


def extraction_accuracy(
    extracted: Mapping[str, Mapping[str, Any]],
    expected: Mapping[str, Iterable[Mapping[str, Any]]],
    fields: Iterable[str],
) -> dict[str, Any]:
    """Share of (row, field) values right, over the rows that are true positives and were extracted.

    ``expected`` maps a row to its acceptable answers (Enron labels give a list per email);
    a field is right when it equals that field of any acceptable answer after
    :func:`normalize_text`. Also returned: the same over all true positives (a missed row
    counts as wrong), so a system that extracts little cannot look accurate.
    """
    names = tuple(fields)
    right = judged = 0
    for row, answers in expected.items():
        got = extracted.get(row)
        if got is None:
            continue
        options = list(answers)
        for name in names:
            judged += 1
            value = normalize_text(got.get(name))
            right += any(value and value == normalize_text(option.get(name)) for option in options)
    total = len(expected) * len(names)
    return {
        "accuracy": round(right / judged, 4) if judged else None,
        "accuracy_over_all_positives": round(right / total, 4) if total else None,
        "rows_judged": judged // len(names) if names else 0,
    }


def label_accuracy(predicted: Mapping[str, Any], truth: Mapping[str, Any]) -> dict[str, Any]:
    """Share of rows whose predicted label equals the true one (case-insensitive); missing rows count wrong."""
    right = sum(1 for row, label in truth.items() if normalize_text(predicted.get(row)) == normalize_text(label))
    answered = sum(1 for row in truth if predicted.get(row) is not None)
    return {
        "accuracy": round(right / len(truth), 4) if truth else None,
        "answered": answered,
        "rows": len(truth),
    }


def count_error(predicted: Mapping[str, int], truth: Mapping[str, int]) -> dict[str, Any]:
    """How far predicted group counts are from the true ones: total absolute error / rows, and exact groups.

    >>> count_error({"a": 3, "b": 1}, {"a": 2, "b": 2})
    {'relative_l1': 0.5, 'groups_exact': 0, 'groups': 2}
    """
    keys = set(predicted) | set(truth)
    l1 = sum(abs(predicted.get(k, 0) - truth.get(k, 0)) for k in keys)
    rows = sum(truth.values())
    exact = sum(1 for k in truth if predicted.get(k, 0) == truth[k])
    return {"relative_l1": round(l1 / rows, 4) if rows else None, "groups_exact": exact, "groups": len(truth)}


def pair_key(left: Any, right: Any) -> tuple[str, str]:
    """An unordered pair of row ids as a sorted tuple of strings."""
    a, b = str(left), str(right)
    return (a, b) if a <= b else (b, a)


def pairs(items: Iterable[Iterable[Any]]) -> set[tuple[str, str]]:
    """Unordered, self-pair-free set of the pairs a system returned."""
    found: set[tuple[str, str]] = set()
    for item in items:
        left, right = tuple(item)
        if str(left) != str(right):
            found.add(pair_key(left, right))
    return found
