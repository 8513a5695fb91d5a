"""The simulated tier: the in-process label-driven ``Simulator`` behind the backend interface.

Announced as simulated by the simulator itself (a ``simulated_model_tier`` warning on start).
A prompt the simulator has no label for comes back as the per-row error ``no_label``, with no
tokens and marked unpaid (``extra["unpaid"]``), so the tier charges no call for it.

>>> backend = SimulatedBackend(TierConfig(backend="simulated", model="sim-small"), None)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from semray.serving.backends.base import Call, RawCompletion
from semray.serving.config import Prices, TierConfig
from semray.serving.errors import UnknownModelError
from semray.serving.identity import fingerprint_json, path_fingerprint, table_fingerprint
from semray.serving.simulator import (
    ChatCompletionRequest,
    ChatMessage,
    ContextLengthExceededError,
    InvalidRequestError,
    NoLabelError,
    ResponseFormat,
    Simulator,
    SimulatorConfig,
)


class SimulatedBackend:
    """Answers calls with ``Simulator.complete`` (its latency and concurrency limit included)."""

    native_json = True

    def __init__(self, tier: TierConfig, simulator: SimulatorConfig | Simulator | None) -> None:
        self._simulator = simulator if isinstance(simulator, Simulator) else Simulator(simulator or SimulatorConfig())
        profiles = self._simulator.config.models
        if tier.model not in profiles:
            raise UnknownModelError(tier.model, "the simulator", tuple(profiles))
        profile = profiles[tier.model]
        self.model = tier.model
        self.context_length: int | None = tier.context_length or profile.context_length
        self.default_prices = Prices(
            input_per_million=profile.price_in_per_million, output_per_million=profile.price_out_per_million
        )
        self.identity = simulator_identity(self._simulator.config, tier.model)

    @property
    def simulator(self) -> Simulator:
        return self._simulator

    async def complete(self, calls: Sequence[Call]) -> list[RawCompletion]:
        return list(await asyncio.gather(*(self._complete_one(call) for call in calls)))

    async def _complete_one(self, call: Call) -> RawCompletion:
        request = ChatCompletionRequest(
            model=self.model,
            messages=tuple(ChatMessage(role=role, content=text) for role, text in call.messages),
            max_tokens=call.max_tokens,
            temperature=call.temperature,
            logprobs=call.logprobs,
            response_format=_response_format(call.json_schema),
        )
        try:
            response = await self._simulator.complete(request)
        except ContextLengthExceededError as error:
            return RawCompletion(text="", error=f"prompt_too_long: {error}")
        except NoLabelError as error:
            return RawCompletion(text="", error=f"no_label: {error}", extra={"simulated": True, "unpaid": True})
        except InvalidRequestError as error:
            return RawCompletion(text="", error=f"model_error: {error}")
        choice = response.choices[0]
        logprobs = tuple(token.logprob for token in choice.logprobs.content) if choice.logprobs else ()
        return RawCompletion(
            text=choice.message.content,
            token_logprobs=logprobs,
            input_tokens=response.usage.prompt_tokens,
            output_tokens=response.usage.completion_tokens,
            finish_reason=choice.finish_reason,
            extra={"simulated": True, "task": response.simulator.task},
        )

    async def aclose(self) -> None:
        return None


def simulator_identity(config: SimulatorConfig, model: str) -> str:
    """What can change this simulated model's answers: the seed, its profile's quality and
    confidence, the context length, tasks, matching, and the datasets (files and in-process
    tables by content). Latency, concurrency and prices are left out: they change no answer.

    >>> seeds = {simulator_identity(SimulatorConfig(seed=seed), "sim-small") for seed in (1, 2)}
    >>> len(seeds)
    2
    """
    profile = config.models[model]
    datasets: dict[str, object] = {}
    for name, spec in sorted(config.datasets.items()):
        datasets[name] = {
            "spec": spec.model_dump(mode="json"),
            "documents": path_fingerprint(spec.path) if spec.table is None else table_fingerprint(spec.table),
            "labels": (
                table_fingerprint(spec.labels_table)
                if spec.labels_table is not None
                else path_fingerprint(spec.labels_path)
            ),
        }
    described = {
        "seed": config.seed,
        "model": model,
        "profile": profile.model_dump(mode="json", include={"error_rate", "confidence", "context_length"}),
        "tasks": [task.model_dump(mode="json") for task in config.tasks],
        "matching": config.matching.model_dump(mode="json"),
        "datasets": datasets,
    }
    return f"simulator:{fingerprint_json(described)}"


def _response_format(schema: dict[str, Any] | None) -> ResponseFormat | None:
    if schema is None:
        return None
    return ResponseFormat.model_validate({"type": "json_schema", "json_schema": {"name": "response", "schema": schema}})
