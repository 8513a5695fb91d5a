"""``semray models check``: call every tier of a profile once, in this process, and say what answered.

Each generative tier gets one short prompt through the same ``ModelTier`` that serves runs (no
cache, no Ray), the embedding tier embeds one sentence. A tier that fails is reported with the
error it raised (endpoint URL, status, attempts), not skipped. The context length is the
profile's ``context_length``, else what the server lists for the model under ``GET /models``
(vLLM's ``max_model_len``), else the backend's own (the simulator profile, the embedder's
``max_seq_length``); prices the profile does not set are shown as not set, not as a price.

>>> TierCheck("small", "openai", "m", "http://127.0.0.1:8000/v1", 32768, "server", "-", 0.1, True, "ok").context
'32768 (server)'
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

import httpx

from semray.errors import SemrayError
from semray.serving.backends import build_backend
from semray.serving.config import LOCAL_EMBEDDING_PRICES, Prices, ServingConfig, TierConfig
from semray.serving.contract import ModelRequest, ModelResponse
from semray.serving.tier import ModelTier

PROBE = "Reply with the single word OK."
CONTEXT_FIELDS = ("max_model_len", "context_length", "context_window", "max_context_length")
"""Where OpenAI-compatible servers list a model's context under ``GET /models`` (vLLM: max_model_len)."""
MODELS_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class TierCheck:
    """What one tier did with the probe."""

    tier: str
    backend: str
    model: str
    where: str
    context_length: int | None
    context_source: str
    """Where ``context_length`` comes from: profile, server, backend, model, or '' when unknown."""
    prices: str
    latency_s: float | None
    logprobs: bool | None
    status: str

    @property
    def ok(self) -> bool:
        return self.status == "ok" or self.status.startswith("ok ")

    @property
    def context(self) -> str:
        """The context length and where it comes from, for the table."""
        if self.context_length is None:
            return "-"
        return f"{self.context_length} ({self.context_source})" if self.context_source else str(self.context_length)


def check_tiers(config: ServingConfig, tiers: tuple[str, ...] = ("embedding", "small", "large")) -> list[TierCheck]:
    """One ``TierCheck`` per tier, in order."""
    return [_check_embedding(config.embedding) if name == "embedding" else _check(name, config) for name in tiers]


def _check(name: str, config: ServingConfig) -> TierCheck:
    tier_config = config.tier(name)
    where = _where(tier_config, config.vllm_http_port)
    try:
        backend = build_backend(tier_config, config)  # loading local weights is not the call's latency
        started = time.perf_counter()
        response = asyncio.run(_probe(ModelTier(name, tier_config, backend)))
    except SemrayError as error:
        return _report(name, tier_config, None, None, None, _failed(tier_config, str(error)), where)
    except Exception as error:  # an engine's own failure (import, weights, CUDA) is the answer here
        failed = _failed(tier_config, f"{type(error).__name__}: {error}")
        return _report(name, tier_config, None, None, None, failed, where)
    latency = time.perf_counter() - started
    status = "ok" if response.ok else _failed(tier_config, str(response.error))
    if tier_config.backend == "simulated" and (response.ok or response.error_code == "no_label"):
        status = "ok (SIMULATED: answers only rows it has labels for)"
    elif response.error_code == "no_label":  # an endpoint that is semray's simulator (`semray sim serve`)
        status = "ok (SIMULATED endpoint: answers only rows it has labels for)"
    context, source = _context(tier_config, backend)
    return TierCheck(
        tier=name,
        backend=tier_config.backend,
        model=backend.model,
        where=where,
        context_length=context,
        context_source=source,
        prices=_prices(tier_config, backend.default_prices),
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

    try:
        embedder = SentenceEmbedder(config)  # loading the weights is not the call's latency
        started = time.perf_counter()
        vectors = embedder.embed([PROBE])
    except Exception as error:  # a missing package or weights folder is the answer here
        return _report("embedding", config, None, None, None, f"FAILED: {type(error).__name__}: {error}")
    status = f"ok ({vectors.shape[1]}-d)"
    latency = time.perf_counter() - started
    return _report("embedding", config, embedder.max_tokens, latency, None, status)


def _report(
    name: str,
    config: TierConfig,
    context: int | None,
    latency: float | None,
    logprobs: bool | None,
    status: str,
    where: str | None = None,
) -> TierCheck:
    source = "profile" if config.context_length is not None else ("model" if context else "")
    return TierCheck(
        tier=name,
        backend=config.backend,
        model=config.model,
        where=where or _where(config),
        context_length=config.context_length or context,
        context_source=source,
        prices=_prices(config, None),
        latency_s=latency,
        logprobs=logprobs,
        status=status,
    )


def _failed(config: TierConfig, error: str) -> str:
    if config.backend == "vllm":
        # Its engines are a Serve app: nothing answers before `serve up` (or a run) deployed them.
        error += "; a vllm tier answers once `semray serve up` has deployed it on this cluster"
    return f"FAILED: {error}"


def _context(config: TierConfig, backend: Any) -> tuple[int | None, str]:
    """The tier's context length and where it comes from (see the module docstring)."""
    if config.context_length is not None:
        return config.context_length, "profile"
    base_url = getattr(backend, "base_url", None)
    if config.backend in ("openai", "vllm") and base_url:
        served = served_context_length(base_url, config.model, config.api_key_env)
        return (served, "server") if served is not None else (None, "")
    context: int | None = backend.context_length
    if context is None:
        return None, ""
    return context, "simulator profile" if config.backend == "simulated" else "backend"


def served_context_length(base_url: str, model: str, api_key_env: str | None = None) -> int | None:
    """The context length an OpenAI-compatible server lists for ``model`` under ``GET /models``
    (vLLM's ``max_model_len``, or ``context_length`` / ``context_window``), or None when it does not say."""
    key = os.environ.get(api_key_env) if api_key_env else None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with httpx.Client(timeout=MODELS_TIMEOUT_S, trust_env=False) as client:
            response = client.get(f"{base_url.rstrip('/')}/models", headers=headers)
        data = response.json().get("data") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    for entry in data if isinstance(data, list) else ():
        if isinstance(entry, dict) and entry.get("id") == model:
            for name in CONTEXT_FIELDS:
                value = entry.get(name)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
    return None


def _prices(config: TierConfig, defaults: Prices | None) -> str:
    """The tier's prices; a tier the profile prices at nothing (only the simulator has a price list) says so."""
    if config.prices is None and config.backend != "simulated":
        return "not set in the profile (counted as $0)"  # endpoint, self-hosted and local embedders have no price list
    prices = config.prices or defaults
    if prices is None:
        return "-"
    if config.backend == "sentence_transformers":
        local = " (a local model the profile prices at $0)" if prices == LOCAL_EMBEDDING_PRICES else ""
        return f"${prices.input_per_million:g} per 1M embedded tokens{local}"
    text = f"${prices.input_per_million:g} in / ${prices.output_per_million:g} out per 1M tokens"
    return text + (f", ${prices.gpu_hour:g} per GPU-hour" if prices.gpu_hour else "")


def _where(config: TierConfig, vllm_port: int | None = None) -> str:
    if config.base_url:
        return config.base_url
    if config.backend == "vllm" and vllm_port is not None:
        return f"http://127.0.0.1:{vllm_port}/v1 (Serve proxy)"
    if config.model_path is not None:
        return str(config.model_path)
    return "in process" if config.backend in ("simulated", "sentence_transformers") else "-"
