"""SemCode: one Python function, written by the large tier or by the user, run sandboxed per batch.

For operations no operator covers (dates written many ways, amounts with currencies, a domain
formula): an instruction, the input columns, the output columns with types, optional examples,
and, once generated or supplied, the function's text. The text is content-addressed: its SHA-256
is part of the plan (``code_sha256``), so a run and its resume execute the same code, and a plan
file whose code was edited without its hash is refused. The function is

    def transform(batch: pandas.DataFrame) -> pandas.DataFrame

over the input columns only, returning the output columns, one row per input row. Execution
(``semray.sandbox``) calls no model: it costs CPU only.

>>> from semray.operators import Scan, Schema, SourceSpec
>>> scan = Scan(source=SourceSpec(kind="csv", path="d.csv"), source_schema=Schema.of(("raw", "VARCHAR")))
>>> node = SemCode(input=scan, instruction="Parse {raw} as a date", inputs=("raw",),
...     outputs=(ExtractField(name="day", type="date"),))
>>> node.output_schema.names
('_rowid', 'raw', 'day')
>>> node.committed
False
"""

from __future__ import annotations

import ast
import hashlib
from typing import Any, ClassVar, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

from semray.errors import PlanError
from semray.operators.base import Node, NodeArgumentError, walk
from semray.operators.relational import Frozen, Unary
from semray.operators.schema import Column, Schema
from semray.operators.semantic import SQL_TYPES, ExtractField, SemanticNode
from semray.operators.templates import check_template, template_columns

FUNCTION_NAME = "transform"
"""The function SemCode's code defines (``semray.sandbox.FUNCTION_NAME``)."""
MAX_CODE_CHARS = 100_000

Cell = StrictStr | StrictInt | StrictFloat | StrictBool | None


def code_sha256(code: str) -> str:
    """The content address of a function's text.

    >>> code_sha256("def transform(batch):\\n    return batch\\n")[:12]
    'e1047b39d755'
    """
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


class CodeExample(Frozen):
    """One input row and the output the function must give for it (checked before commit):
    ``CodeExample(inputs={"raw": "3 Jan 2024"}, outputs={"day": "2024-01-03"})``."""

    inputs: dict[str, Cell]
    outputs: dict[str, Cell]

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.inputs.items())), tuple(sorted(self.outputs.items()))))


class SandboxLimits(Frozen):
    """What one batch may use in the sandbox: CPU seconds, added memory, wall-clock seconds."""

    cpu_s: float = Field(default=10.0, gt=0.0, le=3600.0)
    memory_mb: int = Field(default=1024, ge=64, le=65536)
    wall_s: float = Field(default=30.0, gt=0.0, le=3600.0)


class SemCode(Unary, SemanticNode):
    """Add typed columns computed by a Python function over batches, in a sandbox."""

    op: Literal["sem_code"] = "sem_code"
    calls_llm: ClassVar[bool] = False
    """Only at plan time, to write the function once; the run calls no model."""
    calls_model: ClassVar[bool] = False
    row_preserving: ClassVar[bool] = True
    instruction: str
    """What the function computes, with ``{column}`` references to input columns."""
    inputs: tuple[str, ...]
    """The columns the function receives (nothing else of the row)."""
    outputs: tuple[ExtractField, ...]
    examples: tuple[CodeExample, ...] = ()
    code: str | None = None
    """The function's text; None until the large tier writes it at plan time."""
    code_sha256: str | None = None
    """SHA-256 of ``code`` (filled in when omitted; a mismatch is refused)."""
    origin: Literal["user", "generated"] | None = None
    """Who wrote ``code``: the user, or the large tier (validated before it was committed)."""
    agreement: float | None = Field(default=None, ge=0.0, le=1.0)
    """Share of validation rows where the generated function agreed with the model's own answers."""
    min_agreement: float | None = Field(default=0.9, gt=0.0, le=1.0)
    """The agreement a generated function must reach on the sample; None: no per-row comparison."""
    sample_rows: int = Field(default=20, ge=1, le=1000, strict=True)
    """Input rows the function is validated on (the first round, when ``max_sample_rows`` is set)."""
    max_sample_rows: int | None = Field(default=None, ge=1, le=1000, strict=True)
    """With it, agreement is a statistical decision (``pipeline/runs/plan_time/code_choice.py``): more rounds of
    ``sample_rows`` rows, up to this many, while the bound is undecided; None: one sample."""
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    """The confidence of ``agreement_bound``."""
    agreement_bound: float | None = Field(default=None, ge=0.0, le=1.0)
    """One-sided lower confidence bound on the agreement (at ``confidence``), when it was decided so."""
    checked_rows: int | None = Field(default=None, ge=0, strict=True)
    """Rows the function was validated on before it was committed (None: not validated yet)."""
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    replaces: str | None = None
    """The per-row operator this function stands in for (its label), when the optimizer chose the
    function over it (``planner/rules/prefer_validated_code.py``); EXPLAIN names it."""

    @model_validator(mode="before")
    @classmethod
    def _address_code(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        code, digest = data.get("code"), data.get("code_sha256")
        if isinstance(code, str):
            actual = code_sha256(code)
            if digest is None:
                data = {**data, "code_sha256": actual, "origin": data.get("origin") or "user"}
            elif digest != actual:
                raise NodeArgumentError(
                    "SemCode",
                    ("code_sha256",),
                    f"the code's SHA-256 is {actual}, not {digest}: the code was changed after it was committed; "
                    "remove code_sha256 (and agreement) to run the edited code as your own",
                )
        elif code is None and digest is not None:
            raise NodeArgumentError("SemCode", ("code_sha256",), "a code hash without code; give the code or neither")
        return data

    @property
    def committed(self) -> bool:
        """Whether the node has its function (supplied, or generated and validated)."""
        return self.code is not None

    def derive_schema(self) -> Schema:
        schema = self.input_schema
        if not self.inputs:
            raise PlanError("SemCode: give at least one input column, e.g. inputs=('raw_date',)")
        schema.require(self.inputs, "SemCode inputs")
        if len(set(self.inputs)) != len(self.inputs):
            raise PlanError(f"SemCode: input columns repeat: {list(self.inputs)}")
        referenced = check_template(self.instruction, schema.names, "SemCode")
        if stray := [name for name in referenced if name not in self.inputs]:
            raise PlanError(
                f"SemCode: the instruction references {stray}, which are not inputs {list(self.inputs)}; "
                "add them to inputs"
            )
        if not self.instruction.strip():
            raise PlanError("SemCode: the instruction is empty; say what the function computes")
        if not self.outputs:
            raise PlanError("SemCode: give at least one output column, e.g. 'day: date'")
        names = [field.name for field in self.outputs]
        if len(set(names)) != len(names):
            raise PlanError(f"SemCode: output columns repeat: {names}")
        for name in names:
            if name in schema:
                raise PlanError(f"SemCode: output column {name!r} already exists in the input; choose another name")
        self._check_examples(set(names))
        if self.code is not None:
            check_code(self.code)
        elif any(value is not None for value in (self.origin, self.agreement, self.agreement_bound, self.checked_rows)):
            raise PlanError(
                "SemCode: origin, agreement, agreement_bound and checked_rows describe code; "
                "without code leave them out"
            )
        if self.max_sample_rows is not None and self.max_sample_rows < self.sample_rows:
            raise PlanError(
                f"SemCode: max_sample_rows ({self.max_sample_rows}) is below sample_rows ({self.sample_rows}); "
                "raise it or leave it out"
            )
        columns = tuple(Column(name=field.name, type=SQL_TYPES[field.type]) for field in self.outputs)
        return Schema(columns=schema.columns + columns)

    def _check_examples(self, outputs: set[str]) -> None:
        for position, example in enumerate(self.examples):
            if set(example.inputs) != set(self.inputs):
                raise NodeArgumentError(
                    "SemCode",
                    ("examples", str(position), "inputs"),
                    f"an example gives {sorted(example.inputs)}; give exactly the inputs {list(self.inputs)}",
                )
            if set(example.outputs) != outputs:
                raise NodeArgumentError(
                    "SemCode",
                    ("examples", str(position), "outputs"),
                    f"an example gives {sorted(example.outputs)}; give exactly the outputs {sorted(outputs)}",
                )

    def columns_read(self) -> frozenset[str]:
        return frozenset(self.inputs) | frozenset(template_columns(self.instruction, "SemCode"))

    def output_types(self) -> tuple[tuple[str, str], ...]:
        """(column, semray value type) of each output, e.g. ``(("day", "date"),)``."""
        return tuple((field.name, field.type) for field in self.outputs)

    def question(self) -> None:
        return None  # the function is asked for once, at plan time (serving/prompts/code.py)

    def resolved_tier(self) -> str:
        """``"none"`` once it has its code (it runs sandboxed, CPU only); the large tier writes it before."""
        return "none" if self.committed else "large"

    def label(self) -> str:
        outputs = ", ".join(f"{field.name}: {field.type}" for field in self.outputs)
        if self.code_sha256 is None:
            state = "no code yet: the large tier writes and validates it at plan time"
        else:
            who = "user code" if self.origin == "user" else "generated"
            if self.checked_rows is not None or self.origin == "generated":
                who += f", {self.validation()}"
            state = f"code {self.code_sha256[:12]} ({who}); runs sandboxed, CPU only"
        chosen = f" instead of per-row {self.replaces}" if self.replaces else ""
        return f"SemCode [{state}] {self.instruction!r} -> {outputs}{chosen}"

    def validation(self) -> str:
        """What the validation measured, for EXPLAIN, e.g. ``validated on 60 rows, agreement 1.00,
        95% lower bound 0.92 >= target 0.90``."""
        text = "validated" + (f" on {self.checked_rows} rows" if self.checked_rows is not None else "")
        if self.agreement is not None:
            text += f", agreement {self.agreement:.2f}"
        if self.agreement_bound is not None:
            text += f", {self.confidence:.0%} lower bound {self.agreement_bound:.2f}"
        if self.agreement is not None and self.min_agreement is not None:
            text += f" >= target {self.min_agreement:.2f}"
        return text


def check_code(code: str) -> None:
    """Refuse code that does not parse or defines no top-level ``transform(batch)``.

    >>> check_code("def transform(batch):\\n    return batch\\n")
    """
    if len(code) > MAX_CODE_CHARS:
        raise NodeArgumentError("SemCode", ("code",), f"the code has {len(code):,} characters, over {MAX_CODE_CHARS:,}")
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        raise NodeArgumentError(
            "SemCode", ("code",), f"the code does not parse: {error.msg} (line {error.lineno})"
        ) from None
    functions = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == FUNCTION_NAME
    ]
    if not functions or isinstance(functions[-1], ast.AsyncFunctionDef):
        raise NodeArgumentError(
            "SemCode",
            ("code",),
            f"the code defines no top-level function {FUNCTION_NAME}(batch); write "
            f"'def {FUNCTION_NAME}(batch): ...' returning a pandas DataFrame of the output columns",
        )


def code_listing(plan: Node) -> str:
    """EXPLAIN's listing of every SemCode's function (or that it is still to be written)."""
    blocks = []
    for node in walk(plan):
        if not isinstance(node, SemCode):
            continue
        if node.code is None:
            blocks.append(f"SemCode {node.instruction!r}: no code yet (the large tier writes it at plan time)")
            continue
        assert node.code_sha256 is not None
        body = "\n".join(f"    {line}" for line in node.code.rstrip().splitlines())
        blocks.append(
            f"SemCode {node.instruction!r} code sha256:{node.code_sha256} ({node.origin}; sandboxed, CPU only)\n{body}"
        )
    return "\n\n".join(blocks)
