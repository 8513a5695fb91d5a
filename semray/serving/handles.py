"""Picklable handles to the deployed tiers, with batch retries when a replica dies.

``TierHandles`` holds only app names (Serve handles are resolved lazily in each process), so it
can be passed into Ray Data actor constructors.

>>> handles = TierHandles(apps={"small": "semray-small"})
>>> handles.generate("embedding", [])
Traceback (most recent call last):
...
semray.serving.errors.ServingConfigError: the embedding tier embeds texts; call embed(texts) instead of generate
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from ray import serve
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
from ray.serve.exceptions import DeploymentUnavailableError, RayServeException

from semray.log import get_logger
from semray.serving.config import Prices
from semray.serving.contract import ModelRequest, ModelResponse
from semray.serving.errors import ServingConfigError, ServingError, TiersNotRunningError

log = get_logger(__name__)
T = TypeVar("T")
RETRYABLE: tuple[type[BaseException], ...] = (
    ActorDiedError,
    ActorUnavailableError,
    RayActorError,
    DeploymentUnavailableError,
)
"""A replica died or went away mid-call: the batch is sent again."""


@dataclass
class TierHandles:
    """Picklable access to the deployed tiers; resolves Serve handles lazily in each process.

    ``generate`` sends one batch per call and waits. Each batch gets an id, sent with every
    attempt. When a replica dies mid-batch the whole batch is sent again under the same id (up to
    ``retries`` times). A replica records the answers it pays for under the batch id in the same
    transaction as it caches them, so when the dead replica got that far, the retry reads them
    back *as paid*, with their usage (not as free cache hits), and calls the model only for the
    rest: every call is paid once and counted once. Calls a replica made but died before
    recording (or with no cache) are paid and never reported: they cannot be counted.
    """

    apps: dict[str, str]
    retries: int = 2
    timeout_s: float | None = None
    embedding_prices: Prices = field(default_factory=Prices)
    """What the embedding tier's profile charges (``ServingConfig.embedding.prices``): the embedder's
    replica returns vectors, not a bill, so whoever embeds prices the call with `embedding_dollars`."""
    _handles: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "apps": self.apps,
            "retries": self.retries,
            "timeout_s": self.timeout_s,
            "embedding_prices": self.embedding_prices,
            "_handles": {},
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"embedding_prices": Prices(), **state})  # a state pickled before prices were kept

    def _handle(self, tier: str) -> Any:
        if tier not in self.apps:
            raise ServingConfigError(f"unknown tier {tier!r}; deployed tiers: {', '.join(self.apps)}")
        if tier not in self._handles:
            # The first handle in a process (each actor of a run) logs Serve's router start at INFO,
            # forwarded to the run's console: semray logs its own events.
            logging.getLogger("ray.serve").setLevel(logging.WARNING)
            try:
                self._handles[tier] = serve.get_app_handle(self.apps[tier])
            except RayServeException as error:
                raise TiersNotRunningError(
                    f"tier {tier!r} (Serve app {self.apps[tier]!r}) is not running: {error}; call start_tiers first"
                ) from None
        return self._handles[tier]

    def generate(self, tier: str, requests: Sequence[ModelRequest], *, fresh: bool = False) -> list[ModelResponse]:
        """Answer a batch on ``tier`` (``small`` or ``large``), blocking; one round trip per batch.

        ``fresh`` skips cache reads (the answers are still cached): a probe that must reach the model.
        """
        batch = _batch(tier, requests)
        if not batch:
            return []
        batch_id = uuid.uuid4().hex
        result: list[ModelResponse] = self._retrying(
            tier,
            len(batch),
            lambda _retry: self._handle(tier).generate.remote(batch, fresh, batch_id).result(timeout_s=self.timeout_s),
        )
        return result

    async def agenerate(
        self, tier: str, requests: Sequence[ModelRequest], *, fresh: bool = False
    ) -> list[ModelResponse]:
        """``generate`` for async callers."""
        batch = _batch(tier, requests)
        batch_id = uuid.uuid4().hex
        for attempt in range(self.retries + 1):
            try:
                result: list[ModelResponse] = await self._handle(tier).generate.remote(batch, fresh, batch_id)
                return result
            except RETRYABLE as error:
                self._note_retry(tier, attempt, error, len(batch))
                await asyncio.sleep(0.2 * (attempt + 1))
        return []  # unreachable: _note_retry raises on the last attempt

    def embedding_dollars(self, tokens: int) -> float:
        """Dollars of embedding ``tokens`` on the embedding tier: ``TierHandles({}, embedding_prices=Prices(
        input_per_million=0.02)).embedding_dollars(1000) == 2e-05``."""
        return self.embedding_prices.dollars(tokens, 0)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 (n, d) L2-normalised vectors of ``texts``."""
        batch = list(texts)
        result: np.ndarray = self._retrying(
            "embedding",
            len(batch),
            lambda _retry: self._handle("embedding").embed.remote(batch).result(timeout_s=self.timeout_s),
        )
        return result

    def _retrying(self, tier: str, rows: int, call: Callable[[bool], T]) -> T:
        """``call(retry)`` until it returns; ``retry`` is True from the second attempt on."""
        attempt = 0
        while True:
            try:
                return call(attempt > 0)
            except RETRYABLE as error:
                self._note_retry(tier, attempt, error, rows)
                attempt += 1
                time.sleep(0.2 * attempt)

    def _note_retry(self, tier: str, attempt: int, error: BaseException, rows: int) -> None:
        if attempt >= self.retries:
            raise ServingError(
                f"tier {tier!r} failed {attempt + 1} times: {type(error).__name__}: {error}; "
                "its replica keeps dying (see the Ray logs for the replica's error)"
            ) from error
        self._handles.pop(tier, None)
        log.warning(
            "tier_batch_retry",
            tier=tier,
            attempt=attempt + 1,
            error=type(error).__name__,
            rows=rows,
            note="sent again under the same batch id: answers the dead replica recorded are counted as paid",
        )


def _batch(tier: str, requests: Sequence[ModelRequest]) -> list[ModelRequest]:
    if tier == "embedding":
        raise ServingConfigError("the embedding tier embeds texts; call embed(texts) instead of generate")
    return list(requests)
