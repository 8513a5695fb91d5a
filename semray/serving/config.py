"""Serving configuration: one ``TierConfig`` per tier (embedding, small, large) plus shared options.

The default needs no GPU, network or endpoint: the embedding tier is the packaged
all-MiniLM-L6-v2 (offline) and the two LLM tiers are the simulator, announced as simulated.

>>> config = ServingConfig()
>>> (config.small.backend, config.small.model, config.embedding.backend)
('simulated', 'sim-small', 'sentence_transformers')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from semray.serving.simulator import SimulatorConfig

BackendName = Literal["simulated", "openai", "hf", "vllm", "sentence_transformers"]
TierName = Literal["embedding", "small", "large"]
TIER_NAMES: tuple[str, ...] = ("embedding", "small", "large")
TruncationPolicy = Literal["error", "head", "middle"]


class Prices(BaseModel):
    """A price table entry: dollars per million tokens and per GPU-hour (self-hosted tiers)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_per_million: float = Field(default=0.0, ge=0.0)
    output_per_million: float = Field(default=0.0, ge=0.0)
    gpu_hour: float = Field(default=0.0, ge=0.0, description="$ per GPU-hour, charged on measured GPU-seconds")

    def dollars(self, input_tokens: int, output_tokens: int, gpu_seconds: float = 0.0) -> float:
        """Price one call, e.g. ``Prices(input_per_million=1).dollars(1000, 0) == 0.001``."""
        tokens = input_tokens * self.input_per_million + output_tokens * self.output_per_million
        return tokens / 1e6 + gpu_seconds * self.gpu_hour / 3600.0


class TierConfig(BaseModel):
    """How one tier is served: which backend, which model, its limits, prices and resources."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: BackendName
    model: str = Field(description="model id sent to the backend (simulator profile, endpoint model, hf/vllm id)")
    model_path: Path | None = Field(default=None, description="hf / sentence_transformers / vllm: local weights")
    # openai-compatible endpoints
    base_url: str | None = Field(default=None, description="openai: e.g. http://127.0.0.1:8765/v1")
    api_key_env: str | None = Field(default=None, description="openai: name of the env var holding the API key")
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=4, ge=0, description="retries on 429/5xx/connection errors")
    backoff_s: float = Field(default=0.5, ge=0, description="first retry delay; doubles each retry")
    max_concurrency: int = Field(default=8, ge=1, description="calls in flight per replica")
    native_structured_output: bool = Field(default=True, description="send response_format json_schema")
    # limits
    context_length: int | None = Field(default=None, ge=1, description="default: what the backend reports")
    truncation: TruncationPolicy = Field(
        default="middle", description="over-long prompts: error (row error), head (keep start), middle (cut middle)"
    )
    # prices (None: the backend's own, e.g. the simulator profile's; $0, shown as not set, for the rest).
    # The embedding tier is priced the same way, per 1M embedded tokens (input_per_million).
    prices: Prices | None = None
    # resources of the Ray Serve deployment
    num_cpus: float = Field(default=0.2, ge=0, description="per replica; fractional so tiers fit num_cpus=2")
    num_gpus: float = Field(default=0.0, ge=0)
    replicas: int = Field(default=1, ge=1)
    max_ongoing_requests: int = Field(default=32, ge=1)
    batch_size: int = Field(default=16, ge=1, description="hf/embedding: rows per forward pass")
    device: str = Field(default="cpu", description="hf / sentence_transformers: cpu, cuda, cuda:0")
    torch_threads: int | None = Field(
        default=None, ge=1, description="hf / sentence_transformers on CPU: torch threads (None: every core)"
    )
    # vllm through ray.serve.llm
    accelerator_type: str | None = Field(default=None, description="vllm: e.g. H200")
    tensor_parallel_size: int = Field(default=1, ge=1)
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=1, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_backend(self) -> TierConfig:
        if self.backend == "openai" and not self.base_url:
            raise ValueError(f"openai tier {self.model!r} needs base_url, e.g. http://127.0.0.1:8765/v1")
        if self.max_replicas < self.min_replicas:
            raise ValueError("max_replicas must be >= min_replicas")
        return self


LOCAL_EMBEDDING_PRICES = Prices()
"""The packaged MiniLM runs on the run's own CPUs, which no price list bills: the default profile says so
explicitly ($0 per 1M tokens), so its embeddings count as free by choice, not by a missing price."""


def _default_embedding() -> TierConfig:
    return TierConfig(
        backend="sentence_transformers",
        model="all-MiniLM-L6-v2",
        num_cpus=0.3,
        batch_size=64,
        prices=LOCAL_EMBEDDING_PRICES,
    )


def _default_small() -> TierConfig:
    return TierConfig(backend="simulated", model="sim-small")


def _default_large() -> TierConfig:
    return TierConfig(backend="simulated", model="sim-large")


class ServingConfig(BaseModel):
    """All tiers and the shared options (cache, simulator, Serve app names).

    ``simulator`` is the in-process ``SimulatorConfig`` behind ``simulated`` tiers (None: the
    simulator's defaults, which match no rows). ``cache_dir`` None keeps the cache under the
    settings' state folder; ``cache_enabled=False`` turns it off.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    embedding: TierConfig = Field(default_factory=_default_embedding)
    small: TierConfig = Field(default_factory=_default_small)
    large: TierConfig = Field(default_factory=_default_large)
    scorer: TierConfig | None = Field(
        default=None,
        description="the scorer tier of `semray ask`'s confidence signals, a model that returns token logprobs for "
        "given text: backend 'openai' (an OpenAI-compatible /v1/completions that echoes the prompt's logprobs, e.g. "
        "vLLM's server; base_url, model, api_key_env) or 'hf' (a local transformers causal LM, model_path); "
        "None: none, unless Settings.agent_scorer_model names a local one. Not deployed on Ray: called in process",
    )
    cache_dir: Path | None = None
    cache_enabled: bool = True
    cache_timeout_s: float = Field(
        default=10.0, gt=0, description="seconds to wait for the cache's write lock before degrading to misses"
    )
    cache_scope: Literal["auto", "node", "cluster"] = Field(
        default="auto",
        description="where the tier replicas' response cache lives: 'node' the SQLite file on each replica's node, "
        "'cluster' that file on the head node only, reached through one actor (serving/cluster_cache.py), so an "
        "answer paid on one node is a hit on every other; 'auto' cluster when Ray was joined by address or has "
        "more than one node when the tiers deploy",
    )
    simulator: SimulatorConfig | None = None
    app_prefix: str = Field(default="semray", description="Serve apps are named <prefix>-<tier>")
    handle_retries: int = Field(default=2, ge=0, description="batch retries when a replica dies mid-batch")
    deploy_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="seconds start_tiers waits for deployed tier apps to be RUNNING (loading a real model "
        "can take minutes) before failing with what Serve says",
    )
    vllm_http_port: int = Field(default=8000, description="vllm tiers: Serve's HTTP proxy port on 127.0.0.1")

    @property
    def vllm_tiers(self) -> tuple[TierConfig, ...]:
        return tuple(tier for tier in (self.small, self.large) if tier.backend == "vllm")

    def tier(self, name: str) -> TierConfig:
        if name not in TIER_NAMES:
            from semray.serving.errors import ServingConfigError

            raise ServingConfigError(f"unknown tier {name!r}; tiers are {', '.join(TIER_NAMES)}")
        config: TierConfig = getattr(self, name)
        return config

    def app_name(self, tier: str) -> str:
        return f"{self.app_prefix}-{tier}"

    def cache_path(self, state_dir: Path | None = None) -> Path | None:
        """Where the response cache lives, or None when disabled."""
        if not self.cache_enabled:
            return None
        if self.cache_dir is not None:
            return self.cache_dir / "responses.sqlite"
        base = state_dir if state_dir is not None else Path(".semray")
        return base / "cache" / "responses.sqlite"
