"""``semray models check``: call every tier of a profile once, in this process, and say what answered.

Each generative tier gets one short prompt through the same ``ModelTier`` that serves runs (no
cache, no Ray), the embedding tier embeds one sentence. A tier that fails is reported with the
error it raised (endpoint URL, status, attempts), not skipped.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from semray.errors import SemrayError
from semray.serving.backends import build_backend
from semray.serving.config import Prices, ServingConfig, TierConfig
from semray.serving.contract import ModelRequest, ModelResponse
from semray.serving.tier import ModelTier

PROBE = "Reply with the single word OK."


@dataclass(frozen=True, slots=True)
class TierCheck:
    """What one tier did with the probe."""

    tier: str
    backend: str
    model: str
    where: str
    context_length: int | None
    prices: str
    latency_s: float | None
    logprobs: bool | None
    status: str

    @property
    def ok(self) -> bool:
        return self.status == "ok" or self.status.startswith("ok ")


def check_tiers(config: ServingConfig, tiers: tuple[str, ...] = ("embedding", "small", "large")) -> list[TierCheck]:
    """One ``TierCheck`` per tier, in order."""
    return [_check_embedding(config.embedding) if name == "embedding" else _check(name, config) for name in tiers]


def _check(name: str, config: ServingConfig) -> TierCheck:
    tier_config = config.tier(name)
    started = time.perf_counter()
    try:
        backend = build_backend(tier_config, config)
        response = asyncio.run(_probe(ModelTier(name, tier_config, backend)))
    except SemrayError as error:
        return _report(name, tier_config, None, None, None, f"FAILED: {error}")
    except Exception as error:  # an engine's own failure (import, weights, CUDA) is the answer here
        return _report(name, tier_config, None, None, None, f"FAILED: {type(error).__name__}: {error}")
    latency = time.perf_counter() - started
    prices = tier_config.prices or backend.default_prices
    status = "ok" if response.ok else f"FAILED: {response.error}"
    if tier_config.backend == "simulated" and (response.ok or response.error_code == "no_label"):
        status = "ok (SIMULATED: answers only rows it has labels for)"
    return TierCheck(
        tier=name,
        backend=tier_config.backend,
        model=backend.model,
        where=_where(tier_config),
        context_length=backend.context_length,
        prices=_prices(prices),
        latency_s=latency,
        logprobs=bool(response.token_logprobs) if response.ok else None,
        status=status,
    )


async def _probe(tier: ModelTier) -> ModelResponse:
    try:
        (response,) = await tier.generate([ModelRequest(prompt=PROBE, max_tokens=8, request_id="check")])
        return response
    finally:
        await tier.aclose()


def _check_embedding(config: TierConfig) -> TierCheck:
    from semray.serving.backends.embedder import SentenceEmbedder

    started = time.perf_counter()
    try:
        vectors = SentenceEmbedder(config).embed([PROBE])
    except Exception as error:  # a missing package or weights folder is the answer here
        return _report("embedding", config, None, None, None, f"FAILED: {type(error).__name__}: {error}")
    status = f"ok ({vectors.shape[1]}-d)"
    return _report("embedding", config, None, time.perf_counter() - started, None, status)


def _report(
    name: str, config: TierConfig, context: int | None, latency: float | None, logprobs: bool | None, status: str
) -> TierCheck:
    prices = config.prices
    return TierCheck(
        tier=name,
        backend=config.backend,
        model=config.model,
        where=_where(config),
        context_length=context or config.context_length,
        prices=_prices(prices) if prices else "-",
        latency_s=latency,
        logprobs=logprobs,
        status=status,
    )


def _prices(prices: Prices) -> str:
    return f"${prices.input_per_million:g} in / ${prices.output_per_million:g} out per 1M tokens"


def _where(config: TierConfig) -> str:
    if config.base_url:
        return config.base_url
    if config.model_path is not None:
        return str(config.model_path)
    return "in process" if config.backend in ("simulated", "sentence_transformers") else "-"
