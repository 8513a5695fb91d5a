"""The SemCode benchmark's inputs, without Ray: generated rows are deterministic, and its recorded
functions run in the sandbox, the first draft missing formats the fix handles."""

from __future__ import annotations

import pytest

from benchmarks.semcode import LABELS, TASKS, Task, _table
from semray.operators import parse_fields
from semray.operators.code import check_code
from semray.pipeline.runs.plan_time.code_generation import compare_value
from semray.sandbox import Limits, SandboxWorker


def accuracy(task: Task, code: str, rows: int = 400) -> float:
    table = _table(task, rows, seed=7)
    kinds = {field.name: field.type for field in parse_fields(task.fields)}
    with SandboxWorker(code, ("raw",), tuple(kinds.items()), Limits(10.0, 1024, 30.0)) as worker:
        produced = worker.run(table.select(["raw"])).to_pylist()
    labels = table.to_pylist()
    right = sum(
        all(compare_value(got[name], row[LABELS[task.name][name]], kind) for name, kind in kinds.items())
        for got, row in zip(produced, labels, strict=True)
    )
    return right / rows


def test_generated_rows_are_deterministic_and_unique() -> None:
    for task in TASKS:
        first, again = _table(task, 200, seed=7), _table(task, 200, seed=7)
        assert first == again and len(set(first.column("raw").to_pylist())) == 200


@pytest.mark.parametrize("task", TASKS, ids=[task.name for task in TASKS])
def test_the_first_draft_misses_formats_and_the_fix_handles_nearly_all(task: Task) -> None:
    for code in task.drafts:
        check_code(code)
    first, fix = accuracy(task, task.drafts[0]), accuracy(task, task.drafts[-1])
    assert first < 0.93 < 0.96 <= fix < 1.0  # the rare format stays wrong: measured, not hidden
