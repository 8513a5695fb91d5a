"""Rows that got no answer: recorded per batch, totalled per operator, and the run's threshold.

Each semantic actor commits, with its batch, the rows that failed and why (the per-row error
code of ``semray.serving.contract``: ``no_label``, ``unparseable``, ``empty``, ...). After the
pipeline, the driver folds the journal (``RunState.operators``) into ``FailedRows``: rows
attempted and failed per operator of the plan. A run fails with ``FailedRowsError`` when an
operator's failed share exceeds ``Settings.max_error_rate``; below it, the run succeeds and its
``Result`` and the CLI say how many rows failed.

>>> failures = FailedRows((OperatorFailures("k1", "SemFilter '{t} is good'", "rows", 10, 3, ()),))
>>> failures.total, failures.line()
(3, "3 rows failed: SemFilter '{t} is good' 3 of 10")
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from semray.errors import FailedRowsError
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.semantic import SemanticStage
from semray.transactions import FailureCount, OperatorProgress, RowFailures

if TYPE_CHECKING:
    from semray.operators import Node

_CODE = re.compile(r"[a-z][a-z0-9_]*")
EXAMPLE_CHARS = 300

ADVICE = {
    "no_label": "the simulated tier answers only rows its labels cover: give it labels for these rows "
    "(ServingConfig(simulator=SimulatorConfig.from_labels(...)), docs/simulator.md) or point the tiers at a real "
    "model with a model profile (--models / semray.toml; `semray models schema`)",
    "unparseable": "the model's replies are off-format: use a stronger model, or simplify the instruction",
    "empty": "the model returned empty replies: check the endpoint and the model profile",
    "truncated": "replies hit max_tokens: shorten what the instruction asks for",
    "empty_input": "the prompt's cells are empty or null: filter those rows out first",
    "prompt_too_long": "the rows' text does not fit the model's context: set truncation on the tier",
    "non_string_input": "the prompt's columns hold values that are not text (numbers, lists, undecodable bytes): "
    "cast them to text in the plan (CAST(col AS VARCHAR)) or pick text columns for the template",
    "too_long": "the model's replies are far longer than max_tokens allows (an engine that ignores max_tokens): "
    "check the endpoint's max_tokens support, or use another model",
    "http_400": "the server rejected these requests (HTTP 400; its message is in the example): check the tier's "
    "options against what the server accepts (a server without response_format json_schema needs "
    "native_structured_output = false in the tier config; `semray models schema`)",
    "model_error": "the server refused these requests (its status and message are in the example): check the "
    "endpoint's logs and the model profile",
    "invalid_logprobs": "the engine reported impossible logprobs (above 0, NaN or infinite), so no confidence "
    "could be read from them: fix the engine, or point the tier at another endpoint or model",
    "invalid_usage": "the engine reported impossible token counts (negative, not integers or absurd), so they were "
    "not charged: fix the engine's usage reporting, or use another endpoint",
}


def failure_reason(error: str) -> str:
    """The reason code of a per-row error text (``"no_label: ..."`` -> ``no_label``; else ``error``).

    >>> failure_reason("no_label: the simulator has no label"), failure_reason("boom")
    ('no_label', 'error')
    """
    code, colon, _ = error.partition(":")
    return code.strip() if colon and _CODE.fullmatch(code.strip()) else "error"


def row_failures(row_ids: Sequence[str], errors: Sequence[str | None]) -> tuple[RowFailures, ...]:
    """Group the failed rows of a batch by reason, each with its first error as example.

    >>> [(f.reason, f.row_ids) for f in row_failures(["a", "b", "c"], ["no_label: x", None, "no_label: y"])]
    [('no_label', ('a', 'c'))]
    """
    groups: dict[str, list[str]] = {}
    examples: dict[str, str] = {}
    for row_id, error in zip(row_ids, errors, strict=True):
        if error is None:
            continue
        reason = failure_reason(error)
        groups.setdefault(reason, []).append(row_id)
        examples.setdefault(reason, error[:EXAMPLE_CHARS])
    return tuple(RowFailures(reason=r, row_ids=tuple(ids), example=examples[r]) for r, ids in groups.items())


@dataclass(frozen=True, slots=True)
class OperatorFailures:
    """Rows one operator asked the model about and how many got no answer, by reason."""

    operator_key: str
    operator: str
    """The operator as EXPLAIN names it, e.g. ``SemFilter '{review} is positive'``."""
    unit: str
    """What was asked: ``rows`` (row-wise operators) or ``questions`` (comparisons, aggregation steps)."""
    attempted: int
    failed: int
    reasons: tuple[FailureCount, ...]

    @property
    def share(self) -> float:
        return self.failed / self.attempted if self.attempted else 0.0

    def describe(self) -> str:
        """``SemFilter '...': 300 of 300 rows failed (100%): no_label 300``."""
        text = f"{self.operator}: {self.failed} of {self.attempted} {self.unit} failed ({self.share:.0%})"
        if self.reasons:
            text += ": " + ", ".join(f"{reason.reason} {reason.rows}" for reason in self.reasons)
        return text


@dataclass(frozen=True, slots=True)
class FailedRows:
    """Failed rows of every semantic operator of a run (operators with none included)."""

    operators: tuple[OperatorFailures, ...] = ()

    @property
    def total(self) -> int:
        return sum(operator.failed for operator in self.operators)

    @property
    def failing(self) -> tuple[OperatorFailures, ...]:
        return tuple(operator for operator in self.operators if operator.failed)

    def line(self) -> str:
        """One loud line for the CLI and ``Result``: ``3 rows failed: SemFilter '...' 3 of 10``; "" when none."""
        if not self.total:
            return ""
        parts = [f"{operator.operator} {operator.failed} of {operator.attempted}" for operator in self.failing]
        unit = "row" if self.total == 1 else "rows"
        return f"{self.total} {unit} failed: " + "; ".join(parts)

    def warning(self, run_id: str | None) -> str:
        """The run's closing WARNING line (``line()`` with what became of the rows); "" when none failed."""
        line = self.line()
        if not line:
            return ""
        where = f"; semray runs show {run_id}" if run_id else ""
        return f"WARNING: {line} (rows without an answer are nulls, or dropped by a filter or on_error='skip'{where})"


def operator_labels(plan: Node, stages: Stage) -> dict[str, tuple[str, str]]:
    """Operator key of each model-calling stage -> (its operator's label, unit of what it asks)."""
    # Here, on the driver, not at the top: the actors import this module, and the plan layer
    # (sqlglot, DuckDB) is most of what a fresh actor would import otherwise.
    from semray.operators import walk
    from semray.operators.keys import operator_key

    nodes = {operator_key(node): node for node in walk(plan)}
    labels: dict[str, tuple[str, str]] = {}

    def visit(stage: Stage) -> None:
        key = getattr(stage, "operator_key", None)
        task = getattr(stage, "task", None)
        if isinstance(key, str) and task is not None and getattr(task, "tier", "") != "embedding":
            node = nodes.get(key) or next((nodes[k] for k in reversed(stage.operators) if k in nodes), None)
            label = node.label() if node is not None else stage.describe()
            labels[key] = (label, "rows" if isinstance(stage, SemanticStage) else "questions")
        for child in stage.inputs:
            visit(child)

    visit(stages)
    return labels


def failed_rows(operators: Iterable[OperatorProgress], labels: Mapping[str, tuple[str, str]]) -> FailedRows:
    """The plan's operators (``labels``, from ``operator_labels``) with what a run's journal
    says they attempted and failed; journal keys of no operator of the plan are left out (a
    cascade's small tier, answers bought while measuring statistics)."""
    progress = {operator.operator_key: operator for operator in operators}
    found = []
    for key, (label, unit) in labels.items():
        done = progress.get(key)
        if done is None:
            continue
        found.append(OperatorFailures(key, label, unit, done.rows_attempted, done.rows_failed, done.failures))
    return FailedRows(tuple(found))


def check_failed_rows(failures: FailedRows, max_error_rate: float) -> None:
    """Raise ``FailedRowsError`` for the first operator whose failed share exceeds ``max_error_rate``."""
    for operator in failures.operators:
        if operator.failed and operator.share > max_error_rate:
            raise FailedRowsError(
                too_many_failed(operator, max_error_rate),
                operator=operator.operator,
                failed=operator.failed,
                attempted=operator.attempted,
                reasons={reason.reason: reason.rows for reason in operator.reasons},
            )


def too_many_failed(operator: OperatorFailures, max_error_rate: float) -> str:
    """The message of a run stopped by its failed rows: which operator, how many of how many,
    the top reasons with an example, and what to do."""
    top = operator.reasons[:3]
    reasons = "; ".join(f"{reason.reason} ({reason.rows}), e.g. {reason.example!r}" for reason in top)
    advice = [ADVICE[reason.reason] for reason in top if reason.reason in ADVICE]
    advice.append(
        'or accept the failures: on_error="skip" drops failed rows, and SEMRAY_MAX_ERROR_RATE '
        f"(Settings.max_error_rate, now {max_error_rate:g}) raises the share a run tolerates"
    )
    return (
        f"{operator.operator}: {operator.failed} of {operator.attempted} {operator.unit} got no answer "
        f"({operator.share:.0%}, more than max_error_rate {max_error_rate:.0%}), so the run failed: no rows "
        f"returned, nothing published. Reasons: {reasons}. To fix: " + "; ".join(advice)
    )


def first_row_failed(operator: str, count: int, first: str) -> str:
    """The message of ``on_error="fail"`` stopping at a failed row."""
    rows = "a row" if count == 1 else f"{count} rows of a batch"
    return (
        f"{operator}: {rows} got no answer, e.g. {first[:EXAMPLE_CHARS]!r}; on_error='fail' stops at the "
        f"first failed row. {ADVICE.get(failure_reason(first), 'check the tier and its model')}; or use "
        "on_error='default' (nulls) or 'skip' (drop the row), which count failed rows and fail the run only "
        "past Settings.max_error_rate"
    )
