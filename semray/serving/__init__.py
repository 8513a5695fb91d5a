"""Model serving: embedding, small and large tiers behind one request/response contract.

Light imports only here (contract and config); deployments pull in Ray Serve and are imported
from ``semray.serving.deployments`` by whoever deploys.

>>> from semray.serving import ModelRequest, OutputConstraint
>>> ModelRequest(prompt="Is it good?", constraint=OutputConstraint.choice("Yes", "No")).max_tokens
256
"""

from __future__ import annotations

from semray.serving.config import Prices, ServingConfig, TierConfig
from semray.serving.contract import ModelRequest, ModelResponse, OutputConstraint, Usage
from semray.serving.errors import (
    EndpointAuthError,
    EndpointError,
    EndpointModelError,
    EndpointResponseError,
    EndpointUnavailableError,
    ServingConfigError,
    ServingError,
    TiersNotRunningError,
    UnknownModelError,
)
from semray.serving.usage import UsageLedger, UsageSummary, UsageTotals

__all__ = [
    "EndpointAuthError",
    "EndpointError",
    "EndpointModelError",
    "EndpointResponseError",
    "EndpointUnavailableError",
    "ModelRequest",
    "ModelResponse",
    "OutputConstraint",
    "Prices",
    "ServingConfig",
    "ServingConfigError",
    "ServingError",
    "TierConfig",
    "TiersNotRunningError",
    "UnknownModelError",
    "Usage",
    "UsageLedger",
    "UsageSummary",
    "UsageTotals",
]
