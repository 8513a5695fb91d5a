"""A user's SemCode function is validated before it is committed, like a generated one (types,
one row per input row, nulls, examples, agreement with the model's per-row answers), and fails
clearly, naming the failing rows: no model rewrites it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from semray.errors import CodeValidationError, SandboxOutputError, SandboxViolationError
from semray.operators import Scan, Schema, SourceSpec
from semray.operators.code import CodeExample, SemCode
from semray.operators.semantic import ExtractField
from semray.pipeline.runs.plan_time.code_commit import commit_with, pending_code
from semray.serving.contract import ModelRequest, ModelResponse, Usage
from semray.settings import Settings
from semray.transactions import begin_run

TRUTH = {"3 Jan 2024": "2024-01-03", "2024-02-05": "2024-02-05", "07/04/2024": "2024-07-04"}
SAMPLE = pa.table({"_rowid": ["0", "1", "2"], "raw": list(TRUTH)})
GOOD = (
    "import pandas as pd\n"
    "def transform(batch):\n"
    "    days = pd.to_datetime(batch['raw'], format='mixed', errors='coerce')\n"
    "    return pd.DataFrame({'day': days.dt.date})\n"
)
DAY_FIRST = GOOD.replace("errors='coerce'", "dayfirst=True, errors='coerce'")


class Answers:
    """The large tier's per-row answers, from TRUTH; counts the calls (no code is ever asked for)."""

    def __init__(self) -> None:
        self.calls = 0

    def ask(self, requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        self.calls += len(requests)
        out = []
        for request in requests:
            raw = next(text for text in TRUTH if text in request.prompt)
            value = {"day": TRUTH[raw]}
            usage = Usage(input_tokens=50, output_tokens=5, dollars=0.0005)
            out.append(ModelResponse(text=str(value), value=value, confidence=None, usage=usage, tier="large"))
        return out


def user(code: str, **extra: object) -> SemCode:
    scan = Scan(source=SourceSpec(kind="csv", path="/data/d.csv"), source_schema=Schema.of(("raw", "VARCHAR")))
    return SemCode(
        input=scan,
        instruction="The date in {raw}",
        inputs=("raw",),
        outputs=(ExtractField(name="day", type="date"),),
        code=code,
        **extra,  # type: ignore[arg-type]
    )


def never(_: object) -> object:
    raise AssertionError("no model call")


def test_user_code_is_pending_until_validated_and_then_committed_with_its_rows() -> None:
    node = user(GOOD, min_agreement=None)
    assert pending_code(node) == [node]
    checked = commit_with(node, never, None, lambda _: SAMPLE, agree=False)
    assert isinstance(checked, SemCode) and checked.checked_rows == 3 and checked.agreement is None
    assert checked.origin == "user" and checked.code == GOOD and pending_code(checked) == []
    assert "user code, validated on 3 rows" in checked.label()


def test_user_code_agreeing_with_the_model_is_committed_with_its_agreement() -> None:
    model = Answers()
    checked = commit_with(user(GOOD), model.ask, None, lambda _: SAMPLE)
    assert isinstance(checked, SemCode) and checked.agreement == 1.0 and model.calls == 3


def test_user_code_below_min_agreement_fails_naming_the_rows() -> None:
    with pytest.raises(CodeValidationError, match=r"agrees .* on 33% of 3 sample rows.*failing rows: .*2024-02-05"):
        commit_with(user(DAY_FIRST), Answers().ask, None, lambda _: SAMPLE)


def test_a_wrong_type_fails_with_the_sandboxs_error_naming_the_row() -> None:
    text = "import pandas as pd\ndef transform(batch):\n    return pd.DataFrame({'day': ['soon'] * len(batch)})\n"
    with pytest.raises(SandboxOutputError, match=r"column 'day' row 0"):
        commit_with(user(text, min_agreement=None), never, None, lambda _: SAMPLE, agree=False)


def test_a_wrong_row_count_and_a_violation_fail_before_commit() -> None:
    short = "import pandas as pd\ndef transform(batch):\n    return pd.DataFrame({'day': [None]})\n"
    with pytest.raises(SandboxOutputError, match="1 rows for 3 input rows"):
        commit_with(user(short, min_agreement=None), never, None, lambda _: SAMPLE, agree=False)
    hostile = "import pandas as pd\ndef transform(batch):\n    pd.io.common.os.system('true')\n"
    with pytest.raises(SandboxViolationError, match=r"os\.system"):
        commit_with(user(hostile, min_agreement=None), never, None, lambda _: SAMPLE, agree=False)


def test_a_column_null_on_every_row_and_a_wrong_example_fail() -> None:
    nulls = "import pandas as pd\ndef transform(batch):\n    return pd.DataFrame({'day': [None] * len(batch)})\n"
    with pytest.raises(CodeValidationError, match="null on every one of the 3 sample rows"):
        commit_with(user(nulls, min_agreement=None), never, None, lambda _: SAMPLE, agree=False)
    example = CodeExample(inputs={"raw": "07/04/2024"}, outputs={"day": "2024-07-04"})
    with pytest.raises(
        CodeValidationError, match=r"wrong output for 1 of 1 examples.*failing rows: input .*07/04/2024"
    ):
        commit_with(
            user(DAY_FIRST, min_agreement=None, examples=(example,)), never, None, lambda _: SAMPLE, agree=False
        )


def test_the_check_is_journaled_and_reused_without_calls(tmp_path: Path) -> None:
    run = begin_run(Settings(state_dir=tmp_path), {"plan": "user code"}, None)
    model = Answers()
    first = commit_with(user(GOOD), model.ask, run.ledger, lambda _: SAMPLE)
    second = commit_with(user(GOOD), never, run.ledger, never)
    assert first == second and model.calls == 3 and run.state().usage.calls == 3
    run.finish("succeeded")
