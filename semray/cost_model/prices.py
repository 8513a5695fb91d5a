"""Prices and speeds of the model tiers, read from the serving configuration.

A `TierProfile` says what a token costs on a tier (dollars per million input and output
tokens, GPU-seconds per thousand tokens, dollars per GPU-hour) and how fast it answers
(per-call tokens per second, a fixed per-call latency, calls in flight at once).

Where the figures come from (`profiles_from_serving`):

* fees: ``TierConfig.prices`` when set; otherwise the simulator profile's prices for
  ``simulated`` tiers, and 0 for the rest (self-hosted tiers are charged by GPU time);
* speed of ``simulated`` tiers: the simulator profile (``latency_per_token_s`` and
  ``latency_base_s``; a profile without latency answers instantly: infinite tokens/s);
  other backends: `DEFAULT_TOKENS_PER_S`, a documented assumption, not a measurement;
* concurrency: ``replicas * max_concurrency`` (vllm: ``max_replicas * max_ongoing_requests``); for
  simulated tiers the simulator profile's ``max_concurrency`` per replica, which the simulator enforces
  (the tier's own ``max_concurrency`` limits only an openai client), capped by ``max_ongoing_requests``;
* GPU-seconds per 1k tokens: ``1000 * gpus_per_replica / (tokens_per_s * calls_per_replica)``
  for tiers with GPUs (a replica's GPUs are shared by the calls it serves at once), else 0.

>>> profiles = profiles_from_serving(ServingConfig())
>>> (profiles["small"].fee_in_per_m, profiles["large"].fee_out_per_m, profiles["embedding"].fee_in_per_m)
(0.1, 10.0, 0.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from semray.cost_model.estimates import Interval
from semray.serving.config import TIER_NAMES, ServingConfig, TierConfig
from semray.serving.simulator import SimulatorConfig

DEFAULT_TOKENS_PER_S: dict[str, float] = {
    # Per call, prompt and completion tokens together; assumptions until measured.
    "vllm": 4000.0,  # an 8B model on one H200, prefill-dominated short prompts
    "openai": 1500.0,  # a hosted endpoint, network included
    "hf": 150.0,  # transformers on CPU
    "sentence_transformers": 3000.0,  # MiniLM on CPU, batched
    "simulated": math.inf,
}


@dataclass(frozen=True, slots=True)
class TierProfile:
    """What one tier charges and how fast it answers."""

    name: str
    fee_in_per_m: float
    fee_out_per_m: float
    gpu_seconds_per_1k_tokens: float
    tokens_per_s: float
    concurrency: int
    latency_per_call_s: float = 0.0
    gpu_hour: float = 0.0
    replicas: int = 1
    """Copies of the model serving the tier: a local embedder's throughput is ``tokens_per_s`` per
    replica, however many calls it holds at once (`semray.cost_model.cascade_wall`)."""

    def dollars(self, input_tokens: float, output_tokens: float, gpu_seconds: float = 0.0) -> float:
        """Dollars for this many tokens, as `semray.serving.config.Prices.dollars` charges them."""
        return (input_tokens * self.fee_in_per_m + output_tokens * self.fee_out_per_m) / 1e6 + (
            gpu_seconds * self.gpu_hour / 3600.0
        )

    def seconds(self, calls: Interval, tokens: Interval) -> Interval:
        """Seconds ``calls`` calls sending and receiving ``tokens`` tokens in all take, ``concurrency``
        of them at once: ``(calls * latency_per_call + tokens / tokens_per_s) / concurrency``."""
        speed = 0.0 if math.isinf(self.tokens_per_s) else 1.0 / self.tokens_per_s
        busy = calls.scale(self.latency_per_call_s) + tokens.scale(speed)
        return busy.scale(1.0 / max(1.0, min(float(self.concurrency), calls.value)))

    def call_seconds(self, tokens: float) -> float:
        """Seconds one call of ``tokens`` prompt + completion tokens takes."""
        speed = 0.0 if math.isinf(self.tokens_per_s) else tokens / self.tokens_per_s
        return self.latency_per_call_s + speed


def profiles_from_serving(config: ServingConfig) -> dict[str, TierProfile]:
    """One `TierProfile` per tier of ``config`` (embedding, small, large)."""
    simulator = config.simulator or SimulatorConfig()
    return {name: _profile(name, config.tier(name), simulator) for name in TIER_NAMES}


def _profile(name: str, tier: TierConfig, simulator: SimulatorConfig) -> TierProfile:
    fee_in = fee_out = gpu_hour = 0.0
    tokens_per_s = DEFAULT_TOKENS_PER_S[tier.backend]
    latency_per_call = 0.0
    if tier.backend == "vllm":
        per_replica, replicas = tier.max_ongoing_requests, tier.max_replicas
    else:
        per_replica, replicas = tier.max_concurrency, tier.replicas
    if tier.backend == "simulated" and tier.model in simulator.models:
        model = simulator.models[tier.model]
        fee_in, fee_out = model.price_in_per_million, model.price_out_per_million
        tokens_per_s = 1.0 / model.latency_per_token_s if model.latency_per_token_s > 0 else math.inf
        latency_per_call = model.latency_base_s
        per_replica = min(tier.max_ongoing_requests, model.max_concurrency)
    if tier.prices is not None:
        fee_in, fee_out, gpu_hour = tier.prices.input_per_million, tier.prices.output_per_million, tier.prices.gpu_hour
    gpus = tier.num_gpus * (tier.tensor_parallel_size if tier.backend == "vllm" else 1)
    if tier.backend == "vllm" and gpus == 0:
        gpus = float(tier.tensor_parallel_size)  # ray.serve.llm places one GPU per tensor-parallel rank
    gpu_per_1k = 0.0
    if gpus > 0 and not math.isinf(tokens_per_s):
        gpu_per_1k = 1000.0 * gpus / (tokens_per_s * per_replica)
    return TierProfile(
        name=name,
        fee_in_per_m=fee_in,
        fee_out_per_m=fee_out,
        gpu_seconds_per_1k_tokens=gpu_per_1k,
        tokens_per_s=tokens_per_s,
        concurrency=max(1, per_replica * replicas),
        latency_per_call_s=latency_per_call,
        gpu_hour=gpu_hour,
        replicas=max(1, replicas),
    )
