"""Aggregate questions over many rows: counts per label, or the most common label.

An aggregate prompt quotes many rows (a leaf of a map-reduce) and/or carries partial answers
written as ``value: count`` lines (a reduce step). The truth adds the labels of every quoted
row (a row quoted twice counts twice) to the partial counts found in the prompt's instruction.
A prompt asking for ``partial counts`` is answered as counts whatever the task's statistic, so
a hierarchical aggregation can combine them.

>>> format_counts({"flu": 2, "cold": 5})
'cold: 5\\nflu: 2'
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

from semray.serving.simulator.config import TaskSpec
from semray.serving.simulator.draws import choose_index
from semray.serving.simulator.truth import LabelStore, RowRef

PARTIAL_CUE = "partial counts"
"""Instruction words that ask for counts (a leaf or an intermediate reduce step)."""
_COUNT_LINE = re.compile(r"^\s*([^:\n]{1,200}?)\s*:\s*(\d+)\s*$", re.MULTILINE)


def partial_counts(prompt: str, choices: Sequence[str]) -> Counter[str]:
    """``value: count`` lines of the prompt whose value is one of ``choices`` (case-insensitive).

    >>> partial_counts("Part 1:\\nflu: 2\\nFLU: 1\\nnoise: 4", ["flu"])
    Counter({'flu': 3})
    """
    by_name = {choice.strip().casefold(): choice for choice in choices}
    counts: Counter[str] = Counter()
    for name, number in _COUNT_LINE.findall(prompt):
        choice = by_name.get(name.strip().casefold())
        if choice is not None:
            counts[choice] += int(number)
    return counts


def row_counts(task: TaskSpec, rows: Sequence[RowRef], store: LabelStore) -> Counter[str]:
    """Labels of the quoted rows (null labels are not counted)."""
    counts: Counter[str] = Counter()
    for row in rows:
        value = store.value(row, task.label_column or "")
        if value is not None:
            counts[str(value)] += 1
    return counts


def format_counts(counts: Mapping[str, int]) -> str:
    """One ``value: count`` line per value, most common first (ties by name)."""
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return "\n".join(f"{name}: {count}" for name, count in ordered if count > 0)


def most_common(counts: Mapping[str, int]) -> str | None:
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ordered[0][0] if ordered and ordered[0][1] > 0 else None


def aggregate_truth(task: TaskSpec, counts: Mapping[str, int], partial: bool) -> str | None:
    """The right answer: counts text, or the most common value (None with nothing counted)."""
    if partial or task.statistic == "counts":
        return format_counts(counts)
    return most_common(counts)


def aggregate_wrong(
    task: TaskSpec, counts: Mapping[str, int], partial: bool, store: LabelStore, question: tuple[str | int, ...]
) -> str | None:
    """A deterministic wrong answer: one count off by one, or another value as the most common."""
    if partial or task.statistic == "counts":
        names = sorted(counts) or list(store.choices(task))
        if not names:
            return format_counts(counts)
        changed = dict(counts)
        name = names[choose_index(len(names), "wrong-count", *question)]
        step = 1 if choose_index(2, "wrong-direction", *question) == 0 or changed.get(name, 0) <= 1 else -1
        changed[name] = changed.get(name, 0) + step
        return format_counts(changed)
    truth = most_common(counts)
    others = [choice for choice in store.choices(task) if choice != truth]
    return others[choose_index(len(others), "wrong", *question)] if others else truth
