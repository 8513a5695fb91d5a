"""A batch re-sent after its replica died is paid once and counted once, without Ray: a fake
handle around a real ``TierServer`` (simulated backend, real response cache) whose first reply
is lost."""

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
from semray.serving.errors import ServingError
from semray.serving.handles import TierHandles
from semray.serving.simulator import ModelProfile, SimulatorConfig, TaskSpec
from semray.serving.tier import ModelTier
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
    returning; later calls are answered. Records the ``fresh`` flag and batch id of every call."""

    def __init__(self, server: TierServer, deaths: int = 1) -> None:
        self.server = server
        self.deaths = deaths
        self.fresh: list[bool] = []
        self.batch_ids: list[str | None] = []
        self.generate = self

    def remote(self, batch: list[ModelRequest], fresh: bool = False, batch_id: str | None = None) -> _Reply:
        self.fresh.append(fresh)
        self.batch_ids.append(batch_id)

        def compute() -> list[ModelResponse]:
            responses = asyncio.run(self.server.generate(batch, fresh, batch_id))
            if len(self.fresh) <= self.deaths:
                raise ActorDiedError()
            return responses

        return _Reply(compute)


def _paid_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls that reach the model (cache misses), one entry per attempt that paid."""
    paid: list[int] = []
    answer = ModelTier._answer

    async def counted(self: ModelTier, misses: Sequence[Any]) -> list[ModelResponse]:
        if misses:
            paid.append(len(misses))
        return await answer(self, misses)  # type: ignore[arg-type]

    monkeypatch.setattr(ModelTier, "_answer", counted)
    return paid


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
    paid = _paid_calls(monkeypatch)
    responses = handles.generate("large", _requests())
    assert handle.fresh == [False, False] and handle.batch_ids[0] is not None
    assert handle.batch_ids[1] == handle.batch_ids[0], "the retry carries its batch's id"
    assert [r.value for r in responses] == ["No", "Yes"]
    ledger = UsageLedger()
    ledger.record_many("filter", responses)
    total = ledger.summary().total
    # The dead attempt paid for and cached both answers; read back as free hits the paid calls
    # would vanish. Recorded under the batch id, the retry returns them as paid, without paying again.
    assert paid == [2], "the model is paid once per row, by the dead attempt only"
    assert (total.calls, total.cache_hits) == (2, 0) and total.input_tokens > 0 and total.dollars > 0
    again = handles.generate("large", _requests())
    assert handle.batch_ids[2] != handle.batch_ids[0], "each batch gets its own id"
    assert all(r.cache_hit and r.usage.input_tokens == 0 for r in again), "a later batch still hits the cache"
    assert paid == [2]


def test_a_retry_pays_only_for_what_the_dead_attempt_did_not_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row cached by an earlier batch stays a free hit on the retry; a row the dead attempt
    never reached (here: added to the batch by nobody but the retry's own miss) is paid once."""
    monkeypatch.setattr("semray.serving.handles.time.sleep", lambda seconds: None)
    server = _server(tmp_path)
    first, second = _requests()
    asyncio.run(server.generate([first]))  # an earlier batch, no id: cached, not recorded under any batch
    handle = _DyingHandle(server)
    monkeypatch.setattr("semray.serving.handles.serve.get_app_handle", lambda app: handle)
    paid = _paid_calls(monkeypatch)
    responses = TierHandles(apps={"large": "semray-large"}, retries=2).generate("large", [first, second])
    assert paid == [1], "the dead attempt paid for the one miss; the retry pays nothing"
    assert [(r.cache_hit, r.calls) for r in responses] == [(True, 0), (False, 1)]
    assert responses[1].usage.input_tokens > 0 and responses[0].usage.input_tokens == 0


class _DyingAsyncHandle(_DyingHandle):
    """``_DyingHandle`` for ``await handle.generate.remote(...)``."""

    def remote(self, batch: list[ModelRequest], fresh: bool = False, batch_id: str | None = None) -> Any:
        self.fresh.append(fresh)
        self.batch_ids.append(batch_id)
        attempt = len(self.fresh)

        async def reply() -> list[ModelResponse]:
            responses = await self.server.generate(batch, fresh, batch_id)
            if attempt <= self.deaths:
                raise ActorDiedError()
            return responses

        return reply()


def test_the_async_path_counts_the_dead_attempt_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    handle = _DyingAsyncHandle(_server(tmp_path))
    monkeypatch.setattr("semray.serving.handles.serve.get_app_handle", lambda app: handle)
    paid = _paid_calls(monkeypatch)
    handles = TierHandles(apps={"large": "semray-large"}, retries=1)
    responses = asyncio.run(handles.agenerate("large", _requests()))
    assert len(set(handle.batch_ids)) == 1 and handle.batch_ids[0] is not None
    assert paid == [2] and all(not r.cache_hit and r.calls == 1 for r in responses)


def test_a_fresh_probe_reads_back_its_lost_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fresh`` skips cache reads, not the answers its own lost attempt was paid for."""
    monkeypatch.setattr("semray.serving.handles.time.sleep", lambda seconds: None)
    handle = _DyingHandle(_server(tmp_path))
    monkeypatch.setattr("semray.serving.handles.serve.get_app_handle", lambda app: handle)
    paid = _paid_calls(monkeypatch)
    responses = TierHandles(apps={"large": "semray-large"}, retries=1).generate("large", _requests(), fresh=True)
    assert handle.fresh == [True, True] and paid == [2]
    assert all(not r.cache_hit and r.calls == 1 and r.usage.input_tokens > 0 for r in responses)


def test_a_replica_that_keeps_dying_fails_the_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("semray.serving.handles.time.sleep", lambda seconds: None)
    handle = _DyingHandle(_server(tmp_path), deaths=5)
    monkeypatch.setattr("semray.serving.handles.serve.get_app_handle", lambda app: handle)
    handles = TierHandles(apps={"large": "semray-large"}, retries=1)
    with pytest.raises(ServingError, match="failed 2 times: ActorDiedError"):
        handles.generate("large", _requests())
