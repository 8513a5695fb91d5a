"""Asking a tier many questions on behalf of a set operator, journaled so a resume never pays twice.

Each question has a stable id (a comparison ``a>b``, an aggregation leaf ``g:...:leaf:3``);
answers are committed to the run's batch ledger under the operator's key with what the calls
cost, and looked up there first. Failed answers are not stored (a resume asks them again), but
the questions that failed are committed with their reasons, so the run counts them.

>>> asker = JournaledAsker(tiers, "large", ledger, "op1")  # doctest: +SKIP
>>> asker.ask([request])  # doctest: +SKIP
{'a>b': 'Yes'}
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from semray.log import get_logger
from semray.operators.schema import ROW_ID
from semray.pipeline.workers.failed_rows import row_failures
from semray.pipeline.workers.metering import OperatorMeter, usage_of
from semray.serving.contract import ModelRequest, ModelResponse
from semray.serving.deployments import TierHandles
from semray.transactions import BatchLedger, LLMUsage, batch_key

log = get_logger(__name__)

ANSWER = "answer"
CHUNK = 256
"""Requests per round trip to the tier."""


def answer_text(response: ModelResponse) -> str | None:
    if response.error is not None or response.value is None:
        return None
    value = response.value
    if isinstance(value, bool):
        return "Yes" if value else "No"
    return str(value)


@dataclass
class JournaledAsker:
    """Sends requests to one tier in chunks; answers (text) by request id, None when unanswered."""

    tiers: TierHandles
    tier: str
    ledger: BatchLedger | None
    operator_key: str
    name: str = ""
    """The plan operator's name on the Ray dashboard, e.g. ``SemAgg[summarize the reviews]``
    (default: the operator key)."""
    usage: LLMUsage = field(default_factory=LLMUsage)
    """What this asker paid (this attempt)."""
    failures: int = 0

    @property
    def meter(self) -> OperatorMeter:
        run_dir = getattr(self.ledger, "run_dir", None)
        return OperatorMeter.of(
            run_dir.name if run_dir is not None else None, self.name or self.operator_key, self.tier
        )

    def ask(self, requests: Sequence[ModelRequest]) -> dict[str, str | None]:
        ids = [request.request_id for request in requests]
        if len(set(ids)) != len(ids):
            raise ValueError("request ids must be unique within one ask")
        answers: dict[str, str | None] = self._known(ids)
        todo = [request for request in requests if request.request_id not in answers]
        for start in range(0, len(todo), CHUNK):
            chunk = todo[start : start + CHUNK]
            if self.ledger is not None:
                self.ledger.raise_if_fenced()  # a worker of a run's older attempt stops paying at once
            started = time.perf_counter()
            responses = self.tiers.generate(self.tier, chunk)
            self.meter.responses(responses, time.perf_counter() - started)
            fresh = {
                request.request_id: answer_text(response) for request, response in zip(chunk, responses, strict=True)
            }
            errors = {
                request.request_id: response.error or "empty: the tier gave no value"
                for request, response in zip(chunk, responses, strict=True)
                if fresh[request.request_id] is None
            }
            self.failures += len(errors)
            self._commit(fresh, usage_of(responses), errors)
            answers.update(fresh)
        return answers

    def _known(self, ids: list[str]) -> dict[str, str | None]:
        if self.ledger is None or not ids:
            return {}
        found = self.ledger.lookup_rows(self.operator_key, ids)
        if found.table is None:
            return {}
        rows = found.table.to_pydict()
        return dict(zip((str(i) for i in rows[ROW_ID]), rows[ANSWER], strict=True))

    def _commit(self, answers: dict[str, str | None], usage: LLMUsage, errors: dict[str, str]) -> None:
        self.usage = self.usage + usage
        if self.ledger is None:
            return
        answered = {key: value for key, value in answers.items() if value is not None}
        if not answered and not errors and not usage.calls:
            return
        ids = list(answered)
        table = pa.table({ROW_ID: pa.array(ids, pa.string()), ANSWER: pa.array(list(answered.values()), pa.string())})
        failed = row_failures(list(errors), list(errors.values()))
        key = batch_key(self.operator_key, ids or list(answers))
        self.ledger.commit(self.operator_key, key, ids, table, usage, failed=failed)
