"""vLLM tier rendering: LLMConfig keyword arguments as a snapshot, without vLLM installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from semray.serving.backends.vllm import build_vllm_app, llm_config_kwargs, vllm_backend
from semray.serving.config import ServingConfig, TierConfig
from semray.serving.errors import ServingConfigError
from semray.serving.tier import tier_identity

LARGE = TierConfig(
    backend="vllm",
    model="qwen2.5-72b",
    model_path=Path("/models/qwen2.5-72b"),
    accelerator_type="H200",
    tensor_parallel_size=4,
    min_replicas=1,
    max_replicas=2,
    context_length=16384,
    engine_kwargs={"enable_prefix_caching": True},
)
SMALL = TierConfig(
    backend="vllm", model="qwen2.5-7b", accelerator_type="H200", num_gpus=0.5, gpu_memory_utilization=0.45
)


def test_large_model_spans_several_gpus() -> None:
    assert llm_config_kwargs(LARGE) == {
        "model_loading_config": {"model_id": "qwen2.5-72b", "model_source": "/models/qwen2.5-72b"},
        "engine_kwargs": {
            "tensor_parallel_size": 4,
            "gpu_memory_utilization": 0.9,
            "max_model_len": 16384,
            "enable_prefix_caching": True,
        },
        "deployment_config": {
            "autoscaling_config": {"min_replicas": 1, "max_replicas": 2},
            "max_ongoing_requests": 32,
        },
        "placement_group_config": {"bundle_per_worker": {"GPU": 1.0, "CPU": 1.0}, "strategy": "STRICT_PACK"},
        "runtime_env": {"env_vars": {"HF_HUB_OFFLINE": "1"}},
        "accelerator_type": "H200",
    }


def test_small_model_takes_a_fraction_of_a_gpu() -> None:
    assert llm_config_kwargs(SMALL) == {
        "model_loading_config": {"model_id": "qwen2.5-7b", "model_source": "qwen2.5-7b"},
        "engine_kwargs": {"tensor_parallel_size": 1, "gpu_memory_utilization": 0.45},
        "deployment_config": {
            "autoscaling_config": {"min_replicas": 1, "max_replicas": 1},
            "max_ongoing_requests": 32,
        },
        "placement_group_config": {"bundle_per_worker": {"GPU": 0.5, "CPU": 1.0}, "strategy": "PACK"},
        "accelerator_type": "H200",
    }


def test_vllm_tiers_are_reached_through_the_local_openai_app() -> None:
    config = ServingConfig(small=SMALL, large=LARGE, vllm_http_port=8123)
    assert config.vllm_tiers == (SMALL, LARGE)
    assert vllm_backend(SMALL, config.vllm_http_port).base_url == "http://127.0.0.1:8123/v1"


def test_non_vllm_tiers_are_refused() -> None:
    with pytest.raises(ServingConfigError, match="not 'vllm'"):
        llm_config_kwargs(TierConfig(backend="simulated", model="sim-small"))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_building_the_app_says_what_to_install() -> None:
    with pytest.raises(ServingConfigError, match=r"semray\[gpu\]"):
        build_vllm_app([SMALL])


def test_local_weights_replaced_in_place_change_the_cache_identity(tmp_path: Path) -> None:
    weights = tmp_path / "qwen"
    weights.mkdir()
    (weights / "config.json").write_text('{"layers": 28}')
    tier = SMALL.model_copy(update={"model_path": weights})
    before = tier_identity(tier, vllm_backend(tier))
    assert before == tier_identity(tier, vllm_backend(tier))  # stable while the weights are
    (weights / "config.json").write_text('{"layers": 32}')
    assert tier_identity(tier, vllm_backend(tier)) != before
    hub = tier_identity(SMALL, vllm_backend(SMALL))  # a hub id: the model name and URL are the identity
    assert "vllm:" not in hub and "qwen2.5-7b" in hub
