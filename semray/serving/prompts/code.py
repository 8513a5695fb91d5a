"""Prompts that ask the large tier to write SemCode's function, and to fix it, as versioned data.

The reply is a JSON object ``{"code": "<python source>"}`` (``CODE_SCHEMA``), parsed strictly by
the tier like every JSON answer; the code is never run here, only in the sandbox
(``semray.sandbox``). The per-row answers validation compares the function with are asked as an
ordinary extraction (``operators.build_request("extract", ...)``).

>>> request = code_request("Parse {raw} as a date", (("raw", "VARCHAR"),), (("day", "date"),), (), ())
>>> request.constraint.json_schema["required"]
['code']
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from semray.serving.contract import ModelRequest, OutputConstraint

CODE_PROMPT_VERSION = "code-prompts/1"
CODE_MAX_TOKENS = 2048
CODE_SCHEMA = {
    "type": "object",
    "properties": {"code": {"type": "string"}},
    "required": ["code"],
    "additionalProperties": False,
}
CODE_SYSTEM = (
    "You write small, correct, deterministic Python functions that transform tabular data. "
    "You answer with a JSON object whose only field, code, holds the Python source."
)
CODE_RULES = (
    "Rules:\n"
    "- Define exactly `def transform(batch):` taking a pandas DataFrame with the input columns and "
    "returning a pandas DataFrame with exactly the output columns, one row per input row, in the same order.\n"
    "- Value types: text is str, int is int, float is float, bool is bool, date is datetime.date "
    "(or an ISO 'YYYY-MM-DD' string). Use None for a value the input does not determine.\n"
    "- Import only from: {allowed}. No files, network, processes, environment, randomness or clock.\n"
    "- Input cells may be None. Never raise for an odd row: give None for it instead."
)
CODE_USER = (
    "Write a Python function for this task:\n\n{instruction}\n\n"
    "Input columns: {inputs}\nOutput columns: {outputs}\n\n{rules}{examples}{samples}"
)
CODE_RETRY = (
    "{original}\n\nYour previous function was:\n```python\n{code}\n```\n\n"
    "It failed validation: {problem}\n{rows}\nWrite a corrected function."
)
MAX_SHOWN_ROWS = 10
MAX_CELL_CHARS = 200


def code_request(
    instruction: str,
    inputs: Sequence[tuple[str, str]],
    outputs: Sequence[tuple[str, str]],
    examples: Sequence[tuple[Mapping[str, object], Mapping[str, object]]],
    samples: Sequence[Mapping[str, object]],
    *,
    allowed: Sequence[str] = (),
    request_id: str = "code",
) -> ModelRequest:
    """The first request: the task, the columns with types, examples and a few input rows."""
    return ModelRequest(
        prompt=_task(instruction, inputs, outputs, examples, samples, allowed),
        system=CODE_SYSTEM,
        constraint=OutputConstraint.schema(CODE_SCHEMA),
        max_tokens=CODE_MAX_TOKENS,
        request_id=request_id,
    )


def code_retry_request(
    first: ModelRequest,
    code: str,
    problem: str,
    failing_rows: Sequence[Mapping[str, object]],
    *,
    request_id: str = "code-retry",
) -> ModelRequest:
    """A retry: the first request, the failed function, what was wrong and the rows it got wrong."""
    rows = ""
    if failing_rows:
        shown = "\n".join(_row(row) for row in failing_rows[:MAX_SHOWN_ROWS])
        rows = f"Rows it got wrong (input, your function's output, the expected output):\n{shown}\n"
    prompt = CODE_RETRY.format(original=first.prompt, code=code[:20_000], problem=problem[:2000], rows=rows)
    return first.model_copy(update={"prompt": prompt, "request_id": request_id})


def _task(
    instruction: str,
    inputs: Sequence[tuple[str, str]],
    outputs: Sequence[tuple[str, str]],
    examples: Sequence[tuple[Mapping[str, object], Mapping[str, object]]],
    samples: Sequence[Mapping[str, object]],
    allowed: Sequence[str],
) -> str:
    shown_examples = ""
    if examples:
        lines = "\n".join(f"input {_row(given)} -> output {_row(wanted)}" for given, wanted in examples)
        shown_examples = f"\n\nExamples the function must reproduce:\n{lines}"
    shown_samples = ""
    if samples:
        lines = "\n".join(_row(row) for row in samples[:MAX_SHOWN_ROWS])
        shown_samples = f"\n\nSample input rows:\n{lines}"
    return CODE_USER.format(
        instruction=instruction,
        inputs=", ".join(f"{name} ({kind})" for name, kind in inputs),
        outputs=", ".join(f"{name} ({kind})" for name, kind in outputs),
        rules=CODE_RULES.format(allowed=", ".join(allowed) or "the standard library"),
        examples=shown_examples,
        samples=shown_samples,
    )


def _row(row: Mapping[str, object]) -> str:
    return json.dumps({key: _cell(value) for key, value in row.items()}, ensure_ascii=False, default=str)


def _cell(value: object) -> object:
    if isinstance(value, str) and len(value) > MAX_CELL_CHARS:
        return value[:MAX_CELL_CHARS] + "..."
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
