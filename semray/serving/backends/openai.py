"""Any OpenAI-compatible chat endpoint (OpenAI, vLLM's server, LiteLLM, the simulator over HTTP).

Async ``httpx`` with a per-replica concurrency limit, retries with exponential backoff on 429,
5xx and connection errors (honouring ``Retry-After``), a timeout per call, native structured
output (``response_format: json_schema``) and token logprobs. The API key is read from the
environment variable the config names and lives only in request headers: it is never logged,
never put in an error message, and not part of the config or ``repr``.

>>> backend = OpenAIBackend(TierConfig(backend="openai", model="sim-small",
...     base_url="http://127.0.0.1:8765/v1", api_key_env="OPENAI_API_KEY"))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Sequence
from typing import Any

import httpx

from semray.log import get_logger
from semray.serving.backends.base import Call, RawCompletion
from semray.serving.config import Prices, TierConfig
from semray.serving.errors import EndpointUnavailableError, ServingConfigError, UnknownModelError

log = get_logger(__name__)
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 30.0


class OpenAIBackend:
    """Chat completions against ``base_url`` (e.g. ``http://127.0.0.1:8765/v1``)."""

    def __init__(self, tier: TierConfig, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        if tier.base_url is None:
            raise ServingConfigError(f"openai tier {tier.model!r} needs base_url, e.g. http://127.0.0.1:8765/v1")
        self.model = tier.model
        self.base_url = tier.base_url.rstrip("/")
        self.context_length = tier.context_length
        self.default_prices = Prices()
        self.native_json = tier.native_structured_output
        self._config = tier
        self._transport = transport
        self.__headers = {"Content-Type": "application/json"}
        if tier.api_key_env:
            key = os.environ.get(tier.api_key_env)
            if not key:
                raise ServingConfigError(
                    f"environment variable {tier.api_key_env} (the API key for {self.base_url}) is not set"
                )
            self.__headers["Authorization"] = f"Bearer {key}"
        # One client and one semaphore per event loop (a replica has one; tests make several).
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, asyncio.Semaphore]]
        self._clients = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"OpenAIBackend(model={self.model!r}, base_url={self.base_url!r})"

    def _client(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(self._config.timeout_s),
                transport=self._transport,
                limits=httpx.Limits(max_connections=self._config.max_concurrency),
                trust_env=False,  # never route loopback traffic through an environment proxy
            )
            self._clients[loop] = (client, asyncio.Semaphore(self._config.max_concurrency))
        return self._clients[loop]

    async def complete(self, calls: Sequence[Call]) -> list[RawCompletion]:
        return list(await asyncio.gather(*(self._complete_one(call) for call in calls)))

    async def _complete_one(self, call: Call) -> RawCompletion:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": role, "content": text} for role, text in call.messages],
            "max_tokens": call.max_tokens,
            "temperature": call.temperature,
        }
        if call.logprobs:
            body["logprobs"] = True
        if call.json_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": call.json_schema},
            }
        response = await self._post("/chat/completions", body)
        if response.status_code == 200:
            return _completion(response.json())
        return self._row_error(response)

    def _row_error(self, response: httpx.Response) -> RawCompletion:
        """Map a non-retryable HTTP error to a row error, or raise when nothing can succeed."""
        error = _error_body(response)
        message, code = str(error.get("message", response.text[:500])), str(error.get("code") or "")
        status = response.status_code
        if status == 404 and (code == "model_not_found" or "model" in message.lower()):
            raise UnknownModelError(self.model, self.base_url)
        if status in (401, 403):
            raise ServingConfigError(
                f"{self.base_url} refused the request (HTTP {status}): check the API key in "
                f"${self._config.api_key_env or '<api_key_env not set>'}"
            )
        if code == "context_length_exceeded" or "context length" in message.lower():
            return RawCompletion(text="", error=f"prompt_too_long: {message}")
        if status == 404:
            raise EndpointUnavailableError(f"{self.base_url}/chat/completions", 1, f"HTTP 404: {message}")
        return RawCompletion(text="", error=f"model_error: HTTP {status}: {message}")

    async def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        url = f"{self.base_url}{path}"
        client, slots = self._client()
        attempts = self._config.max_retries + 1
        last_error = ""
        for attempt in range(attempts):
            delay = self._config.backoff_s * (2**attempt)
            try:
                async with slots:
                    response = await client.post(url, json=body, headers=self.__headers)
            except httpx.TimeoutException:
                last_error = f"timed out after {self._config.timeout_s}s"
            except httpx.TransportError as error:
                last_error = f"{type(error).__name__}: {error}"
            else:
                if response.status_code not in RETRY_STATUSES:
                    return response
                last_error = f"HTTP {response.status_code}"
                delay = max(delay, _retry_after(response))
            if attempt + 1 < attempts:
                log.info("endpoint_retry", url=url, attempt=attempt + 1, error=last_error, delay_s=round(delay, 3))
                await asyncio.sleep(delay)
        raise EndpointUnavailableError(url, attempts, last_error)

    async def aclose(self) -> None:
        for client, _ in list(self._clients.values()):
            await client.aclose()
        self._clients.clear()


def _completion(payload: dict[str, Any]) -> RawCompletion:
    choice = payload["choices"][0]
    content = (choice.get("message") or {}).get("content") or ""
    logprobs = choice.get("logprobs") or {}
    tokens = tuple(float(token["logprob"]) for token in (logprobs.get("content") or ()))
    usage = payload.get("usage") or {}
    return RawCompletion(
        text=content,
        token_logprobs=tokens,
        input_tokens=int(usage.get("prompt_tokens", 0)),
        output_tokens=int(usage.get("completion_tokens", 0)),
        finish_reason=str(choice.get("finish_reason") or "stop"),
    )


def _error_body(response: httpx.Response) -> dict[str, Any]:
    try:
        payload = response.json()
    except ValueError:
        return {}
    error = payload.get("error") if isinstance(payload, dict) else None
    return error if isinstance(error, dict) else {}


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(float(response.headers.get("retry-after", 0)), MAX_RETRY_AFTER_S)
    except ValueError:
        return 0.0
