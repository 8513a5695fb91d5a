"""Writing SemCode's function with the large tier, as one commit-or-retry unit.

``generate_code`` asks for a function (``serving/prompts/code.py``), then validates it on a
sample of the operator's input in the sandbox:

1. it parses and defines ``transform(batch)``;
2. it runs in the sandbox within the limits, returning the declared columns and types, one row
   per input row (any ``SandboxError`` is a failed check, never a crash of the engine);
3. it reproduces every example exactly;
4. no output column is null on every sample row where the model's own answers are not;
5. with ``min_agreement`` set, it agrees with the model's own per-row answers (the same
   instruction asked row by row, as an extraction) on at least that share of the sample rows
   the model answered.

On a failure the problem and the failing rows go back to the model, up to ``retries`` (2) more
times; only a function that passes is returned. ``CodeValidationError`` lists every attempt's
failure otherwise.

>>> compare_value(3, 3.0, "int"), compare_value(" Paris ", "paris", "text")
(True, True)
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from semray.errors import CodeValidationError, SandboxError
from semray.log import get_logger
from semray.operators.base import NodeArgumentError
from semray.operators.code import SemCode, check_code
from semray.sandbox import ALLOWED_MODULES, Limits, SandboxWorker
from semray.serving.contract import ModelRequest, ModelResponse, Usage
from semray.serving.prompts import render_prompt
from semray.serving.prompts.code import code_request, code_retry_request
from semray.serving.prompts.operators import build_request
from semray.tasks import TaskKind

log = get_logger(__name__)

Ask = Callable[[Sequence[ModelRequest]], list[ModelResponse]]
"""Answers a batch of requests on the large tier (``TierHandles.generate("large", ...)``, a ``ModelTier``)."""
RETRIES = 2
MAX_FAILING_ROWS = 5
REL_TOLERANCE = 1e-6


@dataclass(frozen=True, slots=True)
class Attempt:
    """One generated function and why it failed (``problem`` None: it passed)."""

    code: str | None
    problem: str | None
    agreement: float | None = None


@dataclass(frozen=True, slots=True)
class GeneratedCode:
    """A validated function, what was tried before it, and what the calls cost."""

    code: str
    agreement: float | None
    attempts: tuple[Attempt, ...]
    usage: Usage = field(default_factory=Usage)
    calls: int = 0


@dataclass(frozen=True, slots=True)
class _Check:
    problem: str | None
    failing: tuple[dict[str, object], ...] = ()
    agreement: float | None = None
    error: SandboxError | None = None
    """The sandbox's own typed error, when the function failed there."""


@dataclass(frozen=True, slots=True)
class FailedCode:
    """No function passed validation: every attempt, and what the calls cost all the same."""

    attempts: tuple[Attempt, ...]
    usage: Usage = field(default_factory=Usage)
    calls: int = 0

    @property
    def agreement(self) -> float | None:
        """The best agreement any attempt reached (None: none was compared)."""
        measured = [attempt.agreement for attempt in self.attempts if attempt.agreement is not None]
        return max(measured) if measured else None


def generate_code(node: SemCode, sample: pa.Table, ask: Ask, *, retries: int = RETRIES) -> GeneratedCode:
    """Ask for ``node``'s function, validate it on ``sample`` (rows of the node's input), retry with
    what went wrong; the first function that passes every check.

    Raises ``CodeValidationError`` after ``1 + retries`` failed functions.
    """
    outcome = try_code(node, sample, ask, retries=retries)
    if isinstance(outcome, GeneratedCode):
        return outcome
    attempts = outcome.attempts
    summary = "; ".join(f"attempt {i + 1}: {a.problem}" for i, a in enumerate(attempts))
    raise CodeValidationError(
        f"SemCode {node.instruction!r}: the large tier wrote no function that passes validation in "
        f"{len(attempts)} attempts ({summary}); supply the function yourself (code=...), add examples, "
        "or lower min_agreement",
        attempts=tuple(a.problem or "" for a in attempts),
    )


def try_code(
    node: SemCode,
    sample: pa.Table,
    ask: Ask,
    *,
    retries: int = RETRIES,
    answers: Sequence[Mapping[str, object] | None] | None = None,
) -> GeneratedCode | FailedCode:
    """`generate_code` without raising: the validated function, or every failed attempt with
    what it cost (the optimizer's code choice keeps the per-row operator then). ``answers``
    (optional): the model's per-row answers on ``sample``, already asked (and paid) elsewhere."""
    rows = sample.select(list(node.inputs)).to_pylist()
    usage, calls = Usage(), 0
    if answers is None:
        answers, usage, calls = model_answers(node, sample, ask)
    input_types = {column.name: column.type for column in node.input_schema.columns}
    first = code_request(
        node.instruction,
        tuple((name, input_types[name]) for name in node.inputs),
        node.output_types(),
        tuple((example.inputs, example.outputs) for example in node.examples),
        rows,
        allowed=ALLOWED_MODULES,
    )
    request = first
    attempts: list[Attempt] = []
    for attempt in range(1 + retries):
        (response,) = ask([request])
        usage, calls = _paid([response], usage, calls)
        code = _code_of(response)
        if code is None:
            check = _Check(f"the reply held no usable code ({response.error or 'no code field'})")
        else:
            check = validate_code(node, code, sample, answers)
        attempts.append(Attempt(code, check.problem, check.agreement))
        log.info(
            "code_attempt",
            instruction=node.instruction,
            attempt=attempt + 1,
            passed=check.problem is None,
            problem=check.problem,
            agreement=check.agreement,
        )
        if check.problem is None and code is not None:
            return GeneratedCode(code, check.agreement, tuple(attempts), usage, calls)
        request = code_retry_request(first, code or response.text, check.problem or "", check.failing)
    return FailedCode(tuple(attempts), usage, calls)


def model_answers(node: SemCode, sample: pa.Table, ask: Ask) -> tuple[list[dict[str, object] | None], Usage, int]:
    """The model's own per-row answers on ``sample`` (None where it gave none), what they cost and
    how many calls; no call without ``min_agreement`` (each row is then None)."""
    rows = sample.select(list(node.inputs)).to_pylist()
    if node.min_agreement is None or not rows:
        return [None] * len(rows), Usage(), 0
    responses = ask(_row_requests(node, rows))
    usage, calls = _paid(responses, Usage(), 0)
    return [response.value if isinstance(response.value, dict) else None for response in responses], usage, calls


@dataclass(frozen=True, slots=True)
class Agreement:
    """How a function's outputs matched the model's answers on some rows."""

    agreeing: int
    compared: int


def run_code(node: SemCode, code: str, sample: pa.Table) -> list[dict[str, object]] | str:
    """``code``'s output rows on ``sample``, run once in the sandbox, or what went wrong (a ``SandboxError``)."""
    if not sample.num_rows:
        return []
    limits = Limits(node.limits.cpu_s, node.limits.memory_mb, node.limits.wall_s)
    try:
        with SandboxWorker(code, node.inputs, node.output_types(), limits) as worker:
            produced: list[dict[str, object]] = worker.run(sample.select(list(node.inputs))).to_pylist()
    except SandboxError as error:
        return f"{type(error).__name__}: {error}"
    return produced


def count_agreement(
    node: SemCode, produced: Sequence[Mapping[str, object]], answers: Sequence[Mapping[str, object] | None]
) -> Agreement:
    """The rows whose outputs match the model's answers (rows the model did not answer are not compared)."""
    outputs = node.output_types()
    compared = [(got, answer) for got, answer in zip(produced, answers, strict=True) if answer]
    return Agreement(sum(_agrees(got, answer, outputs) for got, answer in compared), len(compared))


def check_user_code(
    node: SemCode, sample: pa.Table, answers: Sequence[Mapping[str, object] | None] = ()
) -> float | None:
    """Validate a user's function on ``sample`` like a generated one (`validate_code`: it runs in
    the sandbox, the declared types, one row per input row, nulls, the examples, and with
    ``answers`` the agreement at ``min_agreement``); its agreement (None: not compared).

    No model rewrites user code: a failure in the sandbox raises its own ``SandboxError`` (a
    wrong type names the column and row), any other failed check ``CodeValidationError`` naming
    the check and the failing rows; the user fixes the function (or lowers or unsets
    ``min_agreement``).
    """
    assert node.code is not None
    given = list(answers) if answers else [None] * sample.num_rows
    check = validate_code(node, node.code, sample, given)
    if check.problem is None:
        return check.agreement
    if check.error is not None:
        raise check.error
    rows = "; ".join(_shown(failing) for failing in check.failing[:MAX_FAILING_ROWS])
    shown = f"; failing rows: {rows}" if rows else ""
    raise CodeValidationError(
        f"SemCode {node.instruction!r}: your function fails validation on {sample.num_rows} sample rows: "
        f"{check.problem}{shown}; fix the function (code=...), or lower or unset min_agreement",
        attempts=(check.problem,),
    )


def _shown(failing: Mapping[str, object]) -> str:
    parts = [f"{key} {value!r}" for key, value in failing.items()]
    return ", ".join(parts)


def validate_code(
    node: SemCode, code: str, sample: pa.Table, answers: Sequence[Mapping[str, object] | None] = ()
) -> _Check:
    """Run ``code`` on the sample and the examples in the sandbox and check it (see the module doc)."""
    try:
        check_code(code)
    except NodeArgumentError as error:
        return _Check(error.detail)
    outputs = node.output_types()
    limits = Limits(node.limits.cpu_s, node.limits.memory_mb, node.limits.wall_s)
    with SandboxWorker(code, node.inputs, outputs, limits) as worker:
        try:
            produced = worker.run(sample.select(list(node.inputs))).to_pylist() if sample.num_rows else []
            examples = _examples_table(node)
            from_examples = worker.run(examples).to_pylist() if examples.num_rows else []
        except SandboxError as error:
            return _Check(f"{type(error).__name__}: {error}", error=error)
    wrong = [
        {"input": example.inputs, "output": got, "expected": example.outputs}
        for example, got in zip(node.examples, from_examples, strict=True)
        if not _agrees(got, example.outputs, outputs)
    ]
    if wrong:
        return _Check(f"it gives the wrong output for {len(wrong)} of {len(node.examples)} examples", tuple(wrong))
    rows = sample.select(list(node.inputs)).to_pylist()
    for name, _ in outputs:
        answered = [answer for answer in answers if answer is not None and answer.get(name) is not None]
        if produced and all(row[name] is None for row in produced) and (answered or not any(answers)):
            return _Check(f"column {name!r} is null on every one of the {len(produced)} sample rows")
    if node.min_agreement is None:
        return _Check(None)
    compared = [(row, got, answer) for row, got, answer in zip(rows, produced, answers, strict=True) if answer]
    if not compared:
        return _Check(None)  # the model answered no sample row: nothing to agree with
    failing = tuple(
        {"input": row, "output": got, "expected": dict(answer)}
        for row, got, answer in compared
        if not _agrees(got, answer, outputs)
    )
    agreement = 1.0 - len(failing) / len(compared)
    if agreement < node.min_agreement:
        return _Check(
            f"it agrees with the expected answers on {agreement:.0%} of {len(compared)} sample rows, "
            f"below the {node.min_agreement:.0%} required",
            failing[:MAX_FAILING_ROWS],
            agreement,
        )
    return _Check(None, agreement=agreement)


def compare_value(got: object, wanted: object, kind: str) -> bool:
    """Whether a function's value matches an expected one of type ``kind`` (numbers to 1e-6
    relative, text without case and surrounding space, dates as ISO text)."""
    if got is None or wanted is None:
        return got is None and wanted is None
    if kind in ("int", "float"):
        try:
            a, b = float(got), float(wanted)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return math.isclose(a, b, rel_tol=REL_TOLERANCE, abs_tol=REL_TOLERANCE)
    if kind == "bool":
        return _as_bool(got) == _as_bool(wanted)
    if kind == "date":
        return _as_date(got) == _as_date(wanted)
    return str(got).strip().casefold() == str(wanted).strip().casefold()


def _agrees(got: Mapping[str, object], wanted: Mapping[str, object], outputs: Sequence[tuple[str, str]]) -> bool:
    return all(compare_value(got.get(name), wanted.get(name), kind) for name, kind in outputs)


def _as_bool(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().casefold()
    return True if text in ("true", "yes", "1") else False if text in ("false", "no", "0") else None


def _as_date(value: object) -> str:
    if isinstance(value, datetime.datetime):
        return value.date().isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value).strip()[:10]


def _examples_table(node: SemCode) -> pa.Table:
    schema = node.input_schema.to_arrow()
    fields = [schema.field(name) for name in node.inputs]
    rows = [dict(example.inputs) for example in node.examples]
    return pa.Table.from_pylist(rows, schema=pa.schema(fields))


def _row_requests(node: SemCode, rows: Sequence[Mapping[str, object]]) -> list[ModelRequest]:
    """The instruction asked of each sample row, as an extraction of the output fields."""
    requests = []
    for position, row in enumerate(rows):
        rendered = render_prompt(node.instruction, row, allow_non_string=True)
        requests.append(
            build_request(
                TaskKind.EXTRACT,
                rendered.text,
                request_id=f"validate-{position}",
                input_error=rendered.problem,
                fields=node.output_types(),
            )
        )
    return requests


def _code_of(response: ModelResponse) -> str | None:
    value = response.value
    if not isinstance(value, dict) or not isinstance(value.get("code"), str) or not value["code"].strip():
        return None
    return str(value["code"])


def _paid(responses: Sequence[ModelResponse], usage: Usage, calls: int) -> tuple[Usage, int]:
    for response in responses:
        usage = usage + response.usage
        calls += response.calls
    return usage, calls
