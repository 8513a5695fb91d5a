"""A batch re-sent after its replica died is counted, without Ray: a fake handle around a real
``TierServer`` (simulated backend, real response cache) whose first reply is lost."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from ray.exceptions import ActorDiedError

from semray.serving.config import ServingConfig
from semray.serving.contract import ModelRequest, ModelResponse, OutputConstraint
from semray.serving.deployments import TierServer, tier_digest
from semray.serving.errors import ServingError
from semray.serving.handles import TierHandles
from semray.serving.simulator import ModelProfile, SimulatorConfig, TaskSpec
from semray.serving.usage import UsageLedger

TEXTS = ["the battery died after two days", "a wonderful screen and a lovely camera"]


def _config() -> ServingConfig:
    table = pa.table({"id": ["r0", "r1"], "review": TEXTS, "good": [False, True]})
    simulator = SimulatorConfig.from_labels(
        table,
        key_column="id",
        text_columns=["review"],
        tasks=[TaskSpec(name="good", kind="filter", label_column="good", keywords=("positive",))],
        models={"sim-large": ModelProfile(error_rate=0.0, price_in_per_million=1.0)},
    )
    return ServingConfig(simulator=simulator)


def _requests() -> list[ModelRequest]:
    yes_no = OutputConstraint.choice("Yes", "No")
    return [
        ModelRequest(prompt=f"Is this review positive?\n\n{text}", constraint=yes_no, request_id=str(i))
        for i, text in enumerate(TEXTS)
    ]


class _Reply:
    def __init__(self, compute: Any) -> None:
        self._compute = compute

    def result(self, timeout_s: float | None = None) -> Any:
        return self._compute()


class _DyingHandle:
    """Stands for a Serve handle: the first ``deaths`` calls reach the replica (the model answers
    and the cache is written) but the reply is lost, as when the replica is killed just before
    returning; later calls are answered. Records the ``fresh`` flag of every call."""

    def __init__(self, server: TierServer, deaths: int = 1) -> None:
        self.server = server
        self.deaths = deaths
        self.fresh: list[bool] = []
        self.generate = self

    def remote(self, batch: list[ModelRequest], fresh: bool = False) -> _Reply:
        self.fresh.append(fresh)

        def compute() -> list[ModelResponse]:
            responses = asyncio.run(self.server.generate(batch, fresh))
            if len(self.fresh) <= self.deaths:
                raise ActorDiedError()
            return responses

        return _Reply(compute)


def _server(tmp_path: Path) -> TierServer:
    config = _config()
    cache = str(tmp_path / "responses.sqlite")
    return TierServer("large", config, cache, {"digest": tier_digest(config, "large", cache)})


def test_a_batch_resent_after_its_replica_died_is_paid_and_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("semray.serving.handles.time.sleep", lambda seconds: None)
    handle = _DyingHandle(_server(tmp_path))
    monkeypatch.setattr("semray.serving.handles.serve.get_app_handle", lambda app: handle)
    handles = TierHandles(apps={"large": "semray-large"}, retries=2)
    responses = handles.generate("large", _requests())
    assert handle.fresh == [False, True], "the retry skips cache reads"
    assert [r.value for r in responses] == ["No", "Yes"]
    ledger = UsageLedger()
    ledger.record_many("filter", responses)
    total = ledger.summary().total
    # The dead attempt cached both answers; read back they would be free hits and the paid calls
    # would vanish. Fresh, the retry's own calls come back with their usage, counted once.
    assert (total.calls, total.cache_hits) == (2, 0) and total.input_tokens > 0 and total.dollars > 0
    again = handles.generate("large", _requests())
    assert all(r.cache_hit and r.usage.input_tokens == 0 for r in again), "a later batch still hits the cache"


class _DyingAsyncHandle(_DyingHandle):
    """``_DyingHandle`` for ``await handle.generate.remote(...)``."""

    def remote(self, batch: list[ModelRequest], fresh: bool = False) -> Any:
        self.fresh.append(fresh)
        attempt = len(self.fresh)

        async def reply() -> list[ModelResponse]:
            responses = await self.server.generate(batch, fresh)
            if attempt <= self.deaths:
                raise ActorDiedError()
            return responses

        return reply()


def test_the_async_path_retries_fresh_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    handle = _DyingAsyncHandle(_server(tmp_path))
    monkeypatch.setattr("semray.serving.handles.serve.get_app_handle", lambda app: handle)
    handles = TierHandles(apps={"large": "semray-large"}, retries=1)
    responses = asyncio.run(handles.agenerate("large", _requests()))
    assert handle.fresh == [False, True] and all(not r.cache_hit and r.calls == 1 for r in responses)


def test_a_replica_that_keeps_dying_fails_the_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("semray.serving.handles.time.sleep", lambda seconds: None)
    handle = _DyingHandle(_server(tmp_path), deaths=5)
    monkeypatch.setattr("semray.serving.handles.serve.get_app_handle", lambda app: handle)
    handles = TierHandles(apps={"large": "semray-large"}, retries=1)
    with pytest.raises(ServingError, match="failed 2 times: ActorDiedError"):
        handles.generate("large", _requests())
