"""vLLM tiers through ``ray.serve.llm``: semray renders the ``LLMConfig`` keyword arguments itself.

``ray.serve.llm`` does not import without vLLM, so the rendering is plain data (snapshot-tested
everywhere) and the real ``LLMConfig`` / ``build_openai_app`` objects are built only where vLLM
is installed. All vLLM tiers share one OpenAI-compatible Serve app (``<prefix>-vllm``) behind
Serve's HTTP proxy on 127.0.0.1; each tier's ``TierServer`` reaches it with the ``openai``
backend, so caching, parsing, retries and accounting are the same as for any endpoint.

Placement: a tier with ``num_gpus`` below 1 gets that fraction of a GPU per engine worker (the
small model and the embedder can share one GPU; set ``gpu_memory_utilization`` to match), a tier
with ``tensor_parallel_size`` N spans N whole GPUs.

>>> kwargs = llm_config_kwargs(TierConfig(backend="vllm", model="qwen-7b", accelerator_type="H200",
...     tensor_parallel_size=2))
>>> kwargs["engine_kwargs"]["tensor_parallel_size"], kwargs["accelerator_type"]
(2, 'H200')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from semray.serving.backends.openai import OpenAIBackend
from semray.serving.config import TierConfig
from semray.serving.errors import ServingConfigError
from semray.serving.identity import path_fingerprint

DEFAULT_HTTP_PORT = 8000


def llm_config_kwargs(tier: TierConfig) -> dict[str, Any]:
    """Keyword arguments for ``ray.serve.llm.LLMConfig`` describing this tier."""
    if tier.backend != "vllm":
        raise ServingConfigError(f"tier {tier.model!r} has backend {tier.backend!r}, not 'vllm'")
    engine: dict[str, Any] = {
        "tensor_parallel_size": tier.tensor_parallel_size,
        "gpu_memory_utilization": tier.gpu_memory_utilization,
    }
    if tier.context_length is not None:
        engine["max_model_len"] = tier.context_length
    engine.update(tier.engine_kwargs)
    gpus_per_worker = tier.num_gpus if 0 < tier.num_gpus < 1 else 1.0
    kwargs: dict[str, Any] = {
        "model_loading_config": {
            "model_id": tier.model,
            "model_source": str(tier.model_path) if tier.model_path is not None else tier.model,
        },
        "engine_kwargs": engine,
        "deployment_config": {
            "autoscaling_config": {"min_replicas": tier.min_replicas, "max_replicas": tier.max_replicas},
            "max_ongoing_requests": tier.max_ongoing_requests,
        },
        "placement_group_config": {
            "bundle_per_worker": {"GPU": gpus_per_worker, "CPU": max(tier.num_cpus, 1.0)},
            "strategy": "STRICT_PACK" if tier.tensor_parallel_size > 1 else "PACK",
        },
        "runtime_env": {"env_vars": {"HF_HUB_OFFLINE": "1"}} if tier.model_path is not None else None,
    }
    if tier.accelerator_type is not None:
        kwargs["accelerator_type"] = tier.accelerator_type
    return {key: value for key, value in kwargs.items() if value is not None}


def build_vllm_app(tiers: Sequence[TierConfig]) -> Any:
    """One OpenAI-compatible Serve app serving every vLLM tier (needs vLLM installed)."""
    try:
        from ray.serve.llm import LLMConfig, build_openai_app
    except ImportError as error:
        raise ServingConfigError(
            f"a tier uses backend 'vllm' but ray.serve.llm cannot load ({error}); install semray[gpu] on a GPU machine"
        ) from None
    return build_openai_app({"llm_configs": [LLMConfig(**llm_config_kwargs(tier)) for tier in tiers]})


def vllm_base_url(tier: TierConfig, port: int = DEFAULT_HTTP_PORT) -> str:
    return tier.base_url or f"http://127.0.0.1:{port}/v1"


def vllm_backend(tier: TierConfig, port: int = DEFAULT_HTTP_PORT) -> OpenAIBackend:
    """The client side of a vLLM tier: the openai backend pointed at the shared Serve app. Its
    cache identity adds the weights' fingerprint when they are a local folder (``model_path``),
    so answers of weights replaced in place are not served again."""
    backend = OpenAIBackend(tier.model_copy(update={"base_url": vllm_base_url(tier, port)}))
    if tier.model_path is not None:
        backend.identity = f"vllm:{backend.base_url}:{path_fingerprint(tier.model_path)}"
    return backend
