"""A scripted backend for tier tests: replies from a function of the prompt, calls recorded."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from semray.serving.backends.base import Call, RawCompletion
from semray.serving.config import Prices


class ScriptedBackend:
    native_json = True

    def __init__(
        self,
        reply: Callable[[Call], str],
        *,
        context_length: int | None = None,
        prices: Prices | None = None,
        model: str = "scripted",
    ) -> None:
        self.reply = reply
        self.model = model
        self.context_length = context_length
        self.default_prices = prices or Prices(input_per_million=1.0, output_per_million=2.0)
        self.calls: list[Call] = []

    async def complete(self, calls: Sequence[Call]) -> list[RawCompletion]:
        self.calls.extend(calls)
        return [
            RawCompletion(text=self.reply(call), token_logprobs=(-0.1, 0.0), input_tokens=10, output_tokens=2)
            for call in calls
        ]

    async def aclose(self) -> None:
        return None
