"""The planner's real-model tier: a refused request stops the ask with the endpoint's reason,
while an off-format reply goes back to the loop (which feeds it to the model as an issue)."""

from __future__ import annotations

from typing import Any

import pytest

from semray.planner.agents.errors import PlannerModelError
from semray.planner.agents.models import AgentCall, TierModel
from semray.serving.config import ServingConfig, TierConfig
from semray.serving.contract import ModelRequest, ModelResponse, error_response


def _model(reply: str) -> TierModel:
    serving = ServingConfig(large=TierConfig(backend="openai", model="planner", base_url="http://127.0.0.1:9/v1"))
    model = TierModel(serving, "large")

    async def generate(requests: list[ModelRequest]) -> list[ModelResponse]:
        return [error_response(request, reply, tier="large", model="planner") for request in requests]

    model._tier.generate = generate  # type: ignore[method-assign]
    return model


def _call() -> AgentCall:
    return AgentCall("manipulation", "fill", ModelRequest(prompt="Write the plan as JSON", request_id="r1"))


def test_a_refused_request_raises_with_the_endpoints_reason() -> None:
    model = _model("http_400: http://127.0.0.1:9/v1/chat/completions rejected the request (HTTP 400): bad model")
    with pytest.raises(PlannerModelError, match=r"refused a call.*HTTP 400.*semray models check"):
        model.answer(_call())


@pytest.mark.parametrize("code", ["unparseable", "empty", "truncated"])
def test_an_off_format_reply_comes_back_for_the_loop(code: str) -> None:
    response: Any = _model(f"{code}: the reply").answer(_call())
    assert response.error_code == code
