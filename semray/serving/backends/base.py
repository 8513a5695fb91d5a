"""What a generative backend does: answer rendered chat calls with raw text, logprobs and tokens.

Everything shared (input checks, truncation, cache, parsing, the repair re-ask, pricing) lives
in ``semray.serving.tier``; a backend only talks to its engine. Per-call problems the engine
reports (a prompt it rejects as too long, a refusal) are ``RawCompletion.error`` (a per-row error
text, ``"<code>: <detail>"``); an engine that cannot serve at all raises a ``ServingError``. What
the engine reports is checked by the tier (``semray.serving.validation``) before it is parsed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from semray.serving.config import Prices, ServingConfig, TierConfig
from semray.serving.errors import ServingConfigError


@dataclass(frozen=True, slots=True)
class Call:
    """One rendered chat call: messages as (role, text) pairs and decoding parameters."""

    messages: tuple[tuple[str, str], ...]
    max_tokens: int
    temperature: float
    logprobs: bool
    json_schema: dict[str, Any] | None = None  # sent natively as response_format when set

    @property
    def prompt_text(self) -> str:
        return "\n\n".join(text for _, text in self.messages)


@dataclass(frozen=True, slots=True)
class RawCompletion:
    """An engine's answer to one ``Call`` before parsing."""

    text: str
    token_logprobs: tuple[float, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    gpu_seconds: float = 0.0
    finish_reason: str = "stop"
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    """A generative engine serving one model.

    ``identity`` names what, beyond the tier config, can change its answers (the simulator's
    tables and seed, a weights folder's fingerprint, the endpoint URL); it is part of every
    response-cache key.
    """

    model: str
    context_length: int | None
    default_prices: Prices
    native_json: bool
    identity: str

    async def complete(self, calls: Sequence[Call]) -> list[RawCompletion]:
        """Answer every call (same order); raise only when the engine cannot serve at all."""
        ...

    async def aclose(self) -> None: ...


def build_backend(tier: TierConfig, serving: ServingConfig) -> Backend:
    """The backend a tier config names (imports engines lazily: vLLM and torch are optional)."""
    if tier.backend == "simulated":
        from semray.serving.backends.simulated import SimulatedBackend

        return SimulatedBackend(tier, serving.simulator)
    if tier.backend == "openai":
        from semray.serving.backends.openai import OpenAIBackend

        return OpenAIBackend(tier)
    if tier.backend == "hf":
        from semray.serving.backends.hf import HFBackend

        return HFBackend(tier)
    if tier.backend == "vllm":
        from semray.serving.backends.vllm import vllm_backend

        return vllm_backend(tier, serving.vllm_http_port)
    raise ServingConfigError(f"backend {tier.backend!r} does not generate text; use it for the embedding tier only")
