"""SemCode's commit-or-retry generation against a stand-in large tier that replays recorded
replies through the real request/response path (``ModelTier`` + ``OpenAIBackend`` over an
httpx mock transport: prompts rendered, JSON replies parsed strictly, usage priced)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

from semray.errors import CodeGenerationUnavailableError, CodeValidationError
from semray.operators import Scan, Schema, SourceSpec
from semray.operators.code import CodeExample, SemCode
from semray.operators.semantic import ExtractField
from semray.pipeline.runs.plan_time.code_commit import CODE_BATCH, check_can_write_code, commit_with
from semray.pipeline.runs.plan_time.code_generation import generate_code
from semray.serving.backends.openai import OpenAIBackend
from semray.serving.config import ServingConfig, TierConfig
from semray.serving.contract import ModelRequest, ModelResponse
from semray.serving.prompts.code import CODE_SYSTEM
from semray.serving.tier import ModelTier
from semray.settings import Settings
from semray.transactions import begin_run

ROWS = ["3 Jan 2024", "2024-02-05", "March 7, 2024", "07/04/2024"]
TRUTH = {
    "3 Jan 2024": "2024-01-03",
    "2024-02-05": "2024-02-05",
    "March 7, 2024": "2024-03-07",
    "07/04/2024": "2024-07-04",
}
GOOD = (
    "import pandas as pd\n"
    "def transform(batch):\n"
    "    days = pd.to_datetime(batch['raw'], format='mixed', errors='coerce')\n"
    "    return pd.DataFrame({'day': days.dt.date})\n"
)
WRONG_ORDER = (  # day first: 07/04 becomes 7 April (and 2024-02-05 the 2 May)
    "import pandas as pd\n"
    "def transform(batch):\n"
    "    days = pd.to_datetime(batch['raw'], format='mixed', dayfirst=True, errors='coerce')\n"
    "    return pd.DataFrame({'day': days.dt.date})\n"
)
SOCKET = "import socket\ndef transform(batch):\n    return batch\n"


class RecordedModel:
    """Answers chat completions: code requests from ``replies`` in order, per-row extractions from TRUTH."""

    def __init__(self, replies: Sequence[str]) -> None:
        self.replies = iter(replies)
        self.code_prompts: list[str] = []
        self.row_prompts = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        if system == CODE_SYSTEM:
            self.code_prompts.append(user)
            content = json.dumps({"code": next(self.replies)})
        else:
            self.row_prompts += 1
            raw = next(row for row in ROWS if row in user)
            content = json.dumps({"day": TRUTH[raw]})
        return httpx.Response(
            200,
            json={
                "choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20},
            },
        )

    def ask(self, requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        tier = TierConfig(backend="openai", model="recorded-large", base_url="http://127.0.0.1:9/v1", backoff_s=0.0)

        async def go() -> list[ModelResponse]:
            backend = OpenAIBackend(tier, transport=httpx.MockTransport(self.handle))
            try:
                return await ModelTier("large", tier, backend).generate(list(requests))
            finally:
                await backend.aclose()

        return asyncio.run(go())


def node(**overrides: Any) -> SemCode:
    scan = Scan(source=SourceSpec(kind="csv", path="/data/d.csv"), source_schema=Schema.of(("raw", "VARCHAR")))
    fields: dict[str, Any] = {
        "input": scan,
        "instruction": "The date written in {raw}",
        "inputs": ("raw",),
        "outputs": (ExtractField(name="day", type="date"),),
    }
    return SemCode(**{**fields, **overrides})


SAMPLE = pa.table({"_rowid": [str(i) for i in range(len(ROWS))], "raw": ROWS})


def test_good_code_is_committed_with_its_agreement() -> None:
    model = RecordedModel([GOOD])
    generated = generate_code(node(), SAMPLE, model.ask)
    assert generated.code == GOOD and generated.agreement == 1.0 and len(generated.attempts) == 1
    assert model.row_prompts == len(ROWS)  # the model's own per-row answers, asked once
    assert generated.calls == 1 + len(ROWS) and generated.usage.input_tokens == 100 * (1 + len(ROWS))
    assert "Sample input rows" in model.code_prompts[0] and "3 Jan 2024" in model.code_prompts[0]


def test_failed_validation_goes_back_with_the_error_and_failing_rows() -> None:
    model = RecordedModel([WRONG_ORDER, GOOD])
    generated = generate_code(node(min_agreement=0.9), SAMPLE, model.ask)
    assert generated.code == GOOD and len(generated.attempts) == 2
    assert generated.attempts[0].agreement == 0.5  # 07/04 and 2024-02-05 read day first
    retry = model.code_prompts[1]
    assert "agrees with the expected answers on 50%" in retry and "07/04/2024" in retry and "dayfirst=True" in retry
    assert model.row_prompts == len(ROWS)  # the per-row answers are not asked again


def test_a_sandbox_violation_is_a_failed_check_that_is_retried() -> None:
    model = RecordedModel([SOCKET, GOOD])
    generated = generate_code(node(), SAMPLE, model.ask)
    assert generated.attempts[0].problem is not None and "import 'socket'" in generated.attempts[0].problem
    assert "SandboxViolationError" in model.code_prompts[1]


def test_always_bad_code_fails_after_two_retries() -> None:
    model = RecordedModel([WRONG_ORDER, SOCKET, "def transform(batch) return 1"])
    with pytest.raises(CodeValidationError, match="in 3 attempts") as caught:
        generate_code(node(), SAMPLE, model.ask)
    assert len(caught.value.attempts) == 3 and len(model.code_prompts) == 3
    assert "does not parse" in caught.value.attempts[2]


def test_examples_must_be_reproduced_exactly() -> None:
    example = CodeExample(inputs={"raw": "07/04/2024"}, outputs={"day": "2024-04-07"})  # this user means day first
    model = RecordedModel([GOOD, WRONG_ORDER])
    generated = generate_code(node(examples=(example,), min_agreement=None), SAMPLE, model.ask)
    assert generated.code == WRONG_ORDER and "wrong output for 1 of 1 examples" in (generated.attempts[0].problem or "")
    assert model.row_prompts == 0  # no per-row comparison without min_agreement


def test_an_all_null_column_fails_without_per_row_answers() -> None:
    nulls = "import pandas as pd\ndef transform(batch):\n    return pd.DataFrame({'day': [None] * len(batch)})\n"
    model = RecordedModel([nulls, GOOD])
    generated = generate_code(node(min_agreement=None), SAMPLE, model.ask)
    assert "null on every one of the 4 sample rows" in (generated.attempts[0].problem or "")


def test_the_simulated_tier_says_it_cannot_write_code() -> None:
    with pytest.raises(CodeGenerationUnavailableError, match="cannot write code; supply the function"):
        check_can_write_code(node(), ServingConfig())


def test_a_committed_function_is_journaled_and_reused(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    run = begin_run(settings, {"plan": "test"}, None)
    model = RecordedModel([GOOD])
    committed = commit_with(node(), model.ask, run.ledger, lambda _: SAMPLE)
    assert isinstance(committed, SemCode) and committed.code == GOOD and committed.origin == "generated"
    assert committed.agreement == 1.0 and run.state().usage.calls == 1 + len(ROWS)
    again = RecordedModel([])  # would fail on any code request
    reused = commit_with(node(), again.ask, run.ledger, lambda _: SAMPLE)
    assert reused == committed and again.code_prompts == [] and again.row_prompts == 0
    keys = [key for key in run.state().operators if key.startswith("code:")]
    assert len(keys) == 1 and run.lookup(keys[0], CODE_BATCH) is not None
    run.finish("succeeded")
