"""Kills, usage (issue 26): after a replica dies mid-batch, the run's usage equals what the model
was paid for. No Ray: a fake handle around a real ``TierServer`` (simulated backend, real
response cache) whose first reply is lost, as when the replica is killed after answering.

The dead attempt's calls were answered and paid, but no response carried their usage. The
handle sends the batch again under the same batch id; the replica recorded the answers it paid
for under that id with the ones it cached, so the retry returns them with their usage instead of
calling the model again: paid once per row, counted once per row
(``tests/serving/test_handle_retry_usage.py`` checks the parts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from ray.exceptions import ActorDiedError

from semray.serving.config import ServingConfig
from semray.serving.contract import ModelRequest, ModelResponse, OutputConstraint
from semray.serving.deployments import TierServer, tier_digest
from semray.serving.handles import TierHandles
from semray.serving.simulator import ModelProfile, SimulatorConfig, TaskSpec
from semray.serving.tier import ModelTier
from semray.serving.usage import UsageLedger

pytestmark = pytest.mark.timeout(60)

TEXTS = [f"review number {index} says the battery died" for index in range(12)]


def _server(tmp_path: Path) -> TierServer:
    table = pa.table({"id": [f"r{i}" for i in range(len(TEXTS))], "review": TEXTS, "good": [False] * len(TEXTS)})
    simulator = SimulatorConfig.from_labels(
        table,
        key_column="id",
        text_columns=["review"],
        tasks=[TaskSpec(name="good", kind="filter", label_column="good", keywords=("positive",))],
        models={"sim-large": ModelProfile(error_rate=0.0, price_in_per_million=1.0)},
    )
    config = ServingConfig(simulator=simulator)
    cache = str(tmp_path / "responses.sqlite")
    return TierServer("large", config, cache, {"digest": tier_digest(config, "large", cache)})


class _Reply:
    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self, timeout_s: float | None = None) -> Any:
        if isinstance(self._value, BaseException):
            raise self._value
        return self._value


class _KilledOnceHandle:
    """A Serve handle whose first batch is answered by the replica (the model is called and paid,
    the cache written) and then lost; later batches come back."""

    def __init__(self, server: TierServer) -> None:
        self.server = server
        self.attempts = 0
        self.generate = self

    def remote(self, batch: list[ModelRequest], fresh: bool = False, batch_id: str | None = None) -> _Reply:
        self.attempts += 1
        responses = asyncio.run(self.server.generate(batch, fresh, batch_id))
        return _Reply(ActorDiedError() if self.attempts == 1 else responses)


def _paid_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every call that reaches the model (cache misses), whichever attempt made it."""
    paid: list[int] = []
    answer = ModelTier._answer

    async def counted(self: ModelTier, misses: Sequence[Any]) -> list[ModelResponse]:
        paid.append(len(misses))
        return await answer(self, misses)  # type: ignore[arg-type]

    monkeypatch.setattr(ModelTier, "_answer", counted)
    return paid


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(calls the model was paid for, calls the run's usage counts) for one batch whose replica died."""
    monkeypatch.setattr("semray.serving.handles.time.sleep", lambda seconds: None)
    paid = _paid_calls(monkeypatch)
    handle = _KilledOnceHandle(_server(tmp_path))
    monkeypatch.setattr("semray.serving.handles.serve.get_app_handle", lambda app: handle)
    yes_no = OutputConstraint.choice("Yes", "No")
    requests = [
        ModelRequest(prompt=f"Is this review positive?\n\n{text}", constraint=yes_no, request_id=str(index))
        for index, text in enumerate(TEXTS)
    ]
    responses = TierHandles(apps={"large": "semray-large"}, retries=2).generate("large", requests)
    assert handle.attempts == 2 and all(response.error is None for response in responses)
    ledger = UsageLedger()
    ledger.record_many("filter", responses)
    return sum(paid), ledger.summary().total.calls


def test_the_resent_batch_is_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paid, counted = _run(tmp_path, monkeypatch)
    assert counted == len(TEXTS), "every re-sent call is in the run's usage, none read back as a free hit"
    assert paid >= counted


def test_the_run_counts_every_call_the_model_was_paid_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paid, counted = _run(tmp_path, monkeypatch)
    assert counted == paid, f"the model was paid for {paid} calls, the run counts {counted}"
    assert paid == len(TEXTS), "the retry pays for nothing the dead attempt already paid for"


def test_a_resumed_batch_still_pays_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch sent again later (a resume: a new batch, so a new id) reads the cache as free hits."""
    _run(tmp_path, monkeypatch)
    server = _server(tmp_path)
    paid = _paid_calls(monkeypatch)
    yes_no = OutputConstraint.choice("Yes", "No")
    requests = [ModelRequest(prompt=f"Is this review positive?\n\n{text}", constraint=yes_no) for text in TEXTS]
    handle = _KilledOnceHandle(server)
    handle.attempts = 1  # this replica does not die
    monkeypatch.setattr("semray.serving.handles.serve.get_app_handle", lambda app: handle)
    responses = TierHandles(apps={"large": "semray-large"}).generate("large", requests)
    ledger = UsageLedger()
    ledger.record_many("filter", responses)
    total = ledger.summary().total
    assert sum(paid) == 0 and (total.calls, total.cache_hits, total.dollars) == (0, len(TEXTS), 0.0)
