"""Reflection: after a validated plan ran, the model reads its answer and says whether it answers the question.

The judges (``semantic.py``) validate a plan before it runs; reflection validates what it gave. The
run unit's answer is described (``describe_answer``: its row count, its columns with their types and
null shares, a few sample rows, the rows that got no answer and the rows with an ``_error``) and the
model, shown the question, the plan and that description, answers strict JSON under the
``reflect`` prompt's schema: ``plausible`` or ``implausible``, why, the cause (``data``: the wrong
data or columns; ``logic``: the plan's filters, joins or output) and what to do instead. An
implausible answer is a signal like an execution error: its reason is the run unit's verdict, fed
back to a new plan unit (``plan_unit.py``). A reply that cannot be read is no verdict (the answer is
reported as not checked, never as checked).

>>> Reflection("implausible", "no rows for 'which products'", "logic").issue().code
'reflection'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from semray.operators import ROW_ID, Node, render_tree
from semray.planner.agents.issues import PlanIssue
from semray.planner.agents.json_repair import JsonRepairError, decode_json
from semray.planner.agents.prompts import PROMPTS
from semray.planner.agents.step import StepRunner
from semray.serving.contract import ModelRequest, OutputConstraint

SAMPLE_ROWS = 5
CELL_CHARS = 80
ERROR_COLUMN = "_error"
"""The per-row error column a semantic operator appends (``on_error`` with ``_error`` output)."""
ReflectionVerdict = Literal["plausible", "implausible", "unreadable"]


@dataclass(frozen=True, slots=True)
class Reflection:
    """What the model said of an answer: its verdict, why, the cause and a correction."""

    verdict: ReflectionVerdict
    reason: str = ""
    cause: str = "none"
    correction: str = ""

    @property
    def failed(self) -> bool:
        return self.verdict == "implausible"

    def issue(self) -> PlanIssue | None:
        """The run unit's issue when the answer is implausible (a data cause goes back to the profiling agent)."""
        if not self.failed:
            return None
        code = "reflection_data" if self.cause == "data" else "reflection"
        return PlanIssue(
            "plan", f"the answer failed reflection: {self.reason or 'no reason given'}", code, self.correction
        )

    def line(self) -> str:
        """``reflection: implausible (no rows ...)`` for evidence, logs and the CLI."""
        said = f" ({self.reason})" if self.reason else ""
        return f"reflection: {self.verdict}{said}"


def reflect(runner: StepRunner, question: str, plan: Node, executed: Any, structured: bool = True) -> Reflection:
    """One recorded model step (``reflection/check``): does the answer ``executed`` answer ``question``?"""
    prompt = PROMPTS["reflect"]
    assert prompt.output_schema is not None
    text = prompt.render(question=question, tree=render_tree(plan), answer=describe_answer(executed))
    constraint = OutputConstraint.schema(prompt.output_schema) if structured else OutputConstraint.text()
    request = ModelRequest(
        prompt=text, system=prompt.system, constraint=constraint, max_tokens=prompt.max_tokens, request_id="reflect"
    )
    outcome = runner.ask("reflection", "check", {"question": question}, request)
    return read_reflection(outcome.response.text)


def read_reflection(text: str) -> Reflection:
    """A reply parsed strictly against the ``reflect`` schema; anything else is ``unreadable``.

    >>> read_reflection('{"verdict": "plausible", "reason": "3 products", "cause": "none", "correction": ""}').failed
    False
    >>> read_reflection("looks fine").verdict
    'unreadable'
    """
    try:
        value, _ = decode_json(text)
    except JsonRepairError:
        return Reflection("unreadable", text[:200])
    if not isinstance(value, dict) or value.get("verdict") not in ("plausible", "implausible"):
        return Reflection("unreadable", text[:200])
    cause = value.get("cause")
    return Reflection(
        value["verdict"],
        str(value.get("reason", "")),
        cause if cause in ("none", "data", "logic") else "logic",
        str(value.get("correction", "")),
    )


def rendered_reflection(verdict: str, reason: str = "", cause: str = "none", correction: str = "") -> str:
    """A reflection reply as JSON (what a recorded model answers)."""
    return json.dumps({"verdict": verdict, "reason": reason, "cause": cause, "correction": correction})


def describe_answer(executed: Any, sample_rows: int = SAMPLE_ROWS) -> str:
    """What the model is shown of an answer: rows, columns with null shares, a sample, failed and error rows.

    >>> print(describe_answer(pa.table({"product": ["lamp", None]})))
    2 row(s), 1 column(s)
    columns:
    - product (string): 1 null (50%)
    sample (first 2 rows):
    {"product": "lamp"}
    {"product": null}
    """
    table = executed if isinstance(executed, pa.Table) else getattr(executed, "table", None)
    if not isinstance(table, pa.Table):
        return f"not a table: {str(executed)[:200]!r}"
    table = table.drop_columns([ROW_ID]) if ROW_ID in table.column_names else table
    rows = table.num_rows
    lines = [f"{rows} row(s), {table.num_columns} column(s)", "columns:"]
    for field, column in zip(table.schema, table.columns, strict=True):
        nulls = column.null_count
        share = f" ({nulls / rows:.0%})" if rows else ""
        lines.append(f"- {field.name} ({field.type}): {nulls} null{share}")
    if ERROR_COLUMN in table.column_names and rows:
        errors = rows - table.column(ERROR_COLUMN).null_count
        lines.append(f"rows with an error ({ERROR_COLUMN} set): {errors} of {rows} ({errors / rows:.0%})")
    failed = getattr(executed, "failed_line", None)
    line = failed() if callable(failed) else ""
    if line:
        lines.append(f"rows that got no answer: {line}")
    if rows:
        shown = table.slice(0, sample_rows).to_pylist()
        lines.append(f"sample (first {len(shown)} rows):")
        lines.extend(json.dumps({key: _cell(value) for key, value in row.items()}, default=str) for row in shown)
    else:
        lines.append("no rows")
    return "\n".join(lines)


def _cell(value: Any) -> Any:
    if isinstance(value, str) and len(value) > CELL_CHARS:
        return value[:CELL_CHARS] + "..."
    return value
