"""What the agents call: a model answering one ``ModelRequest`` for a named agent step.

``TierModel`` serves a configured tier in this process (the same ``ModelTier`` that runs use,
without Ray); ``require_planning_tier`` refuses simulated tiers, which answer row questions from
labels and cannot write plans. Recorded and fault-injecting stand-ins live in ``recorded.py``
and ``standin.py``.

>>> from semray.serving.config import ServingConfig
>>> require_planning_tier(ServingConfig(), "large")  # doctest: +SKIP
Traceback (most recent call last):
PlanningNeedsModelError: planning needs a real LLM tier ...
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from semray.cost_model.prices import TierProfile, profiles_from_serving
from semray.planner.agents.errors import PlannerModelError, PlanningNeedsModelError
from semray.serving.backends import build_backend
from semray.serving.config import ServingConfig, TierConfig
from semray.serving.contract import ModelRequest, ModelResponse
from semray.serving.tier import ModelTier

NATIVE_JSON_BACKENDS = frozenset({"openai", "vllm"})
REFUSALS = frozenset(
    {
        "empty_input",
        "non_string_input",
        "prompt_too_long",
        "http_400",
        "model_error",
        "invalid_logprobs",
        "invalid_usage",
        "no_label",
    }
)
"""Per-row error codes (``serving/contract.py``) that say the tier did not answer the request; the
reply-format ones (unparseable, empty, truncated, too long) are the model's answer, fed back."""
"""Backends that take a JSON schema as ``response_format`` (guided decoding)."""


@dataclass(frozen=True, slots=True)
class AgentCall:
    """One model call of an agent step: who asks (``agent``, ``step``) and what."""

    agent: str
    step: str
    request: ModelRequest


class AgentModel(Protocol):
    """A model the agents can call; ``profile`` prices its tokens (``cost_model.prices``)."""

    @property
    def profile(self) -> TierProfile: ...

    @property
    def name(self) -> str: ...

    @property
    def structured_output(self) -> bool:
        """Whether a JSON-schema constraint is enforced by the engine (guided decoding)."""
        ...

    def answer(self, call: AgentCall) -> ModelResponse: ...


class TierModel:
    """A configured tier answering agent calls in this process, e.g. ``TierModel(serving, "large")``."""

    def __init__(self, serving: ServingConfig, tier: str = "large") -> None:
        config = require_planning_tier(serving, tier)
        self._config = config
        self._tier = ModelTier(tier, config, build_backend(config, serving))
        self._profile = profiles_from_serving(serving)[tier]

    @property
    def profile(self) -> TierProfile:
        return self._profile

    @property
    def name(self) -> str:
        return f"{self._config.backend}:{self._config.model}"

    @property
    def structured_output(self) -> bool:
        return self._config.backend in NATIVE_JSON_BACKENDS and self._config.native_structured_output

    def answer(self, call: AgentCall) -> ModelResponse:
        """The tier's reply; a refused request (``REFUSALS``) raises ``PlannerModelError``, while an
        off-format reply comes back for the loop to feed to the model as an issue."""
        (response,) = asyncio.run(self._tier.generate([call.request]))
        if response.error_code in REFUSALS:
            raise PlannerModelError(
                f"the planner's {self._tier.name!r} tier ({self.name}) refused a call instead of answering: "
                f"{response.error[:400] if response.error else ''}; check the tier with `semray models check` "
                "(its base_url, model name and context length)"
            )
        return response

    def close(self) -> None:
        asyncio.run(self._tier.backend.aclose())


def require_planning_tier(serving: ServingConfig, tier: str = "large") -> TierConfig:
    """The tier's config when it is a real LLM; a typed refusal when it is simulated."""
    config = serving.tier(tier)
    if config.backend == "simulated":
        raise PlanningNeedsModelError(
            f"planning needs a real LLM tier, but the {tier!r} tier is simulated ({config.model}): the simulator "
            "answers row questions from labels and cannot write plans. Configure one in a model profile, e.g. "
            f'semray.toml with [{tier}] backend = "openai", model = "...", base_url = "http://127.0.0.1:8000/v1" '
            '(or backend = "hf" with model_path), check it with `semray models check`, and see `semray models '
            "show`; or replay recorded answers with --replay FILE"
        )
    if config.backend == "sentence_transformers":
        raise PlanningNeedsModelError(f"tier {tier!r} is an embedder; planning needs a generative LLM tier")
    return config
