"""The simulated model tier: a deterministic, label-driven stand-in for LLMs (see docs/simulator.md).

>>> from semray.serving.simulator import Simulator, SimulatorConfig  # doctest: +SKIP
>>> Simulator(SimulatorConfig.from_file(Path("sim.json"))).complete_sync(request)  # doctest: +SKIP
"""

from __future__ import annotations

from semray.serving.simulator.config import (
    ConfidenceProfile,
    DatasetSpec,
    MatchingConfig,
    ModelProfile,
    SimulatorConfig,
    TaskSpec,
)
from semray.serving.simulator.errors import (
    ContextLengthExceededError,
    InvalidRequestError,
    NoLabelError,
    SimulatorConfigError,
    SimulatorError,
    UnknownModelError,
)
from semray.serving.simulator.protocol import (
    SYSTEM_FINGERPRINT,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatMessage,
    CompletionRequest,
    CompletionResponse,
    ResponseFormat,
)
from semray.serving.simulator.simulator import Simulator
from semray.serving.simulator.stats import SimulatorStats

__all__ = [
    "SYSTEM_FINGERPRINT",
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "ChatMessage",
    "CompletionRequest",
    "CompletionResponse",
    "ConfidenceProfile",
    "ContextLengthExceededError",
    "DatasetSpec",
    "InvalidRequestError",
    "MatchingConfig",
    "ModelProfile",
    "NoLabelError",
    "ResponseFormat",
    "Simulator",
    "SimulatorConfig",
    "SimulatorConfigError",
    "SimulatorError",
    "SimulatorStats",
    "TaskSpec",
    "UnknownModelError",
]
