"""Any OpenAI-compatible chat endpoint (OpenAI, vLLM's server, LiteLLM, the simulator over HTTP).

Async ``httpx`` with a per-replica concurrency limit, retries with exponential backoff on 429,
5xx, connection errors, timeouts and bodies that are not JSON (honouring ``Retry-After``), a
timeout per call, native structured output (``response_format: json_schema``) and token
logprobs. The API key is read from the environment variable the config names and lives only
in request headers: it is never logged, never put in an error message (server text that echoes
it is redacted), and not part of the config or ``repr``.

What cannot succeed raises an ``EndpointError`` subclass naming the URL, model, HTTP status,
attempts and a hint: unreachable / timeout / 429 / 5xx after every retry
(``EndpointUnavailableError``), 401/403 (``EndpointAuthError``), 404 for the model
(``EndpointModelError``, listing the models the server serves), a body that is not a chat
completion (``EndpointResponseError``). A request the server rejects (HTTP 400, other 4xx) is a
per-row error.

>>> backend = OpenAIBackend(TierConfig(backend="openai", model="sim-small",
...     base_url="http://127.0.0.1:8765/v1", api_key_env="OPENAI_API_KEY"))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from semray.log import get_logger
from semray.serving.backends.base import Call, RawCompletion
from semray.serving.config import Prices, TierConfig
from semray.serving.contract import row_error
from semray.serving.errors import (
    EndpointAuthError,
    EndpointError,
    EndpointModelError,
    EndpointReason,
    EndpointResponseError,
    EndpointUnavailableError,
    PromptLogprobsError,
    ServingConfigError,
)

log = get_logger(__name__)
WHOLE_WORD_KEY_CHARS = 8
"""Keys shorter than this are redacted from messages as whole tokens only (see ``_redact``)."""
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 30.0
SHOWN_CHARS = 300
"""How much of a server's error text goes into an error message."""
MODELS_TIMEOUT_S = 5.0
"""Timeout of the one ``GET /models`` made to list served models after a 404."""


NOT_JSON: Any = object()
"""The decoded body of a response that is not JSON (a JSON ``null`` body decodes to None)."""


class MalformedBodyError(ValueError):
    """A 200 body is not a chat completion; the message says which part is wrong."""


@dataclass(frozen=True, slots=True)
class _Reply:
    """The last HTTP response of a call, its decoded JSON (``NOT_JSON`` when not JSON) and the attempts made."""

    response: httpx.Response
    payload: Any
    attempts: int


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
        self.identity = f"openai:{self.base_url}"
        self._config = tier
        self._transport = transport
        self.__headers = {"Content-Type": "application/json"}
        self.__key = ""
        if tier.api_key_env:
            key = os.environ.get(tier.api_key_env)
            if not key:
                raise ServingConfigError(
                    f"environment variable {tier.api_key_env} (the API key for {self.base_url}) is not set in "
                    f"process {os.getpid()} on {socket.gethostname()}; a tier's Serve replica reads it from the "
                    "environment its Ray node was started with: set it before the command that starts the local "
                    "Ray, or before `ray start` on every node of a cluster"
                )
            self.__key = key
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
        url = f"{self.base_url}/chat/completions"
        reply = await self._post(url, body)
        if reply.response.status_code == 200:
            try:
                return parse_chat_completion(reply.payload, where=f"{url} (model {self.model!r}, HTTP 200)")
            except MalformedBodyError as error:
                raise self._failed(
                    EndpointResponseError, url, "malformed_body", self._redact(str(error)), 200, reply.attempts
                ) from None
        return await self._row_error(url, reply)

    async def post_completion(
        self, body: dict[str, Any], *, not_found_hint: str = "", rejected_hint: str = ""
    ) -> tuple[Any, str]:
        """POST ``body`` to the legacy ``/completions`` route (prompt scoring); the decoded 200 body and the URL.

        Retried like a chat call; every other answer raises an ``EndpointError`` (the caller cannot go on without
        this one): a refused key, an unknown model, a missing route (404, ``not_found_hint`` says what to set) and
        a request the server rejects (HTTP 400, other 4xx: ``PromptLogprobsError`` with its message and
        ``rejected_hint``).
        """
        url = f"{self.base_url}/completions"
        reply = await self._post(url, body)
        status = reply.response.status_code
        if status == 200:
            return reply.payload, url
        message, _code = self._message(reply)
        await self._raise_refusal(url, reply, not_found_hint=not_found_hint)
        raise self._failed(
            PromptLogprobsError,
            url,
            "rejected",
            f"HTTP {status}: {message}",
            status,
            reply.attempts,
            hint=rejected_hint,
        )

    def _message(self, reply: _Reply) -> tuple[str, str]:
        """A failed reply's message (redacted, shortened) and error code."""
        error = _error_object(reply.payload)
        message = self._redact(str(error.get("message") or reply.response.text)[:SHOWN_CHARS])
        return message, str(error.get("code") or "")

    async def _raise_refusal(self, url: str, reply: _Reply, *, not_found_hint: str = "") -> None:
        """Raise for what no request to this endpoint can get past: a refused key, an unknown model, no route."""
        status = reply.response.status_code
        message, code = self._message(reply)
        detail = f"HTTP {status}: {message}"
        if status in (401, 403):
            env = self._config.api_key_env
            hint = (
                f"check the API key in the environment variable {env} (named by api_key_env in the tier config)"
                if env
                else "no API key was sent: set api_key_env in the tier config to the name of the env var holding it"
            )
            raise self._failed(EndpointAuthError, url, "unauthorized", detail, status, reply.attempts, hint=hint)
        if status == 404 and (code == "model_not_found" or "model" in message.lower()):
            available = await self._served_models()
            raise self._failed(
                EndpointModelError, url, "unknown_model", detail, status, reply.attempts, available=available
            )
        if status == 404:
            raise self._failed(
                EndpointUnavailableError, url, "not_found", detail, status, reply.attempts, hint=not_found_hint
            )

    async def _row_error(self, url: str, reply: _Reply) -> RawCompletion:
        """Map a non-retryable HTTP error to a row error, or raise when nothing can succeed."""
        status = reply.response.status_code
        await self._raise_refusal(url, reply)
        message, code = self._message(reply)
        if code == "context_length_exceeded" or "context length" in message.lower():
            return RawCompletion(text="", error=row_error("prompt_too_long", message))
        if status == 422 and code == "no_label":  # semray's simulator served over HTTP (`semray sim serve`)
            return RawCompletion(text="", error=row_error("no_label", f"{url} (model {self.model!r}): {message}"))
        where = f"{url} (model {self.model!r}) rejected the request"
        if status == 400:
            return RawCompletion(text="", error=row_error("http_400", f"{where} (HTTP 400): {message}"))
        return RawCompletion(text="", error=row_error("model_error", f"{where} (HTTP {status}): {message}"))

    async def _post(self, url: str, body: dict[str, Any]) -> _Reply:
        client, slots = self._client()
        attempts = self._config.max_retries + 1
        reason: EndpointReason = "unreachable"
        last_error, last_status = "", None
        for attempt in range(attempts):
            delay = self._config.backoff_s * (2**attempt)
            try:
                async with slots:
                    response = await client.post(url, json=body, headers=self.__headers)
            except httpx.TimeoutException:
                reason, last_error, last_status = "timeout", f"timed out after {self._config.timeout_s}s", None
            except httpx.TransportError as error:
                reason, last_error, last_status = "unreachable", f"{type(error).__name__}: {error}", None
            else:
                last_status = response.status_code
                if response.status_code in RETRY_STATUSES:
                    reason = "rate_limited" if response.status_code == 429 else "server_error"
                    text = str(_error_object(_decoded(response)).get("message") or response.text)
                    last_error = f"HTTP {response.status_code}: {text[:SHOWN_CHARS]}"
                    delay = max(delay, _retry_after(response))
                else:
                    payload = _decoded(response)
                    if response.status_code != 200 or payload is not NOT_JSON:
                        return _Reply(response, payload, attempt + 1)
                    reason, last_error = "invalid_json", _not_json(response)
            if attempt + 1 < attempts:
                log.info("endpoint_retry", url=url, attempt=attempt + 1, error=last_error, delay_s=round(delay, 3))
                await asyncio.sleep(delay)
        kind = EndpointResponseError if reason == "invalid_json" else EndpointUnavailableError
        raise self._failed(kind, url, reason, self._redact(last_error), last_status, attempts)

    async def _served_models(self) -> tuple[str, ...]:
        """The model ids ``GET /models`` lists, or () when the server does not say."""
        client, _ = self._client()
        try:
            response = await client.get(
                f"{self.base_url}/models", headers=self.__headers, timeout=min(self._config.timeout_s, MODELS_TIMEOUT_S)
            )
            data = response.json().get("data") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return ()
        if not isinstance(data, list):
            return ()
        return tuple(str(item["id"]) for item in data[:50] if isinstance(item, dict) and "id" in item)

    def _failed(
        self,
        kind: type[EndpointError],
        url: str,
        reason: EndpointReason,
        detail: str,
        status: int | None,
        attempts: int,
        *,
        hint: str = "",
        available: tuple[str, ...] = (),
    ) -> EndpointError:
        error = kind(url, self.model, reason, detail, status=status, attempts=attempts, hint=hint, available=available)
        log.warning("endpoint_failed", url=url, model=self.model, reason=reason, status=status, attempts=attempts)
        return error

    def _redact(self, text: str) -> str:
        """``text`` with the API key replaced by ``***``: wherever it occurs, so a server that echoes
        it (even URL-encoded next to other characters) shows none of it; a key shorter than
        ``WHOLE_WORD_KEY_CHARS`` only where it stands as a whole token, so that a test key such as
        ``k`` is not cut out of every word holding its letters (``tas***s``)."""
        if not self.__key:
            return text
        if len(self.__key) >= WHOLE_WORD_KEY_CHARS:
            return text.replace(self.__key, "***")
        return re.sub(rf"(?<![A-Za-z0-9]){re.escape(self.__key)}(?![A-Za-z0-9])", "***", text)

    async def aclose(self) -> None:
        for client, _ in list(self._clients.values()):
            await client.aclose()
        self._clients.clear()


def parse_chat_completion(payload: Any, *, where: str = "the endpoint") -> RawCompletion:
    """A chat-completion body as a ``RawCompletion``; raises ``MalformedBodyError`` when it is not one.

    Null content is a per-row ``empty`` error (servers send it for refusals); a list of text
    parts is joined; logprobs that are not numbers are a per-row ``invalid_logprobs`` error.
    Token counts must be integers here; their range is checked by the tier.

    >>> parse_chat_completion({"choices": [{"message": {"content": "Yes"}}],
    ...     "usage": {"prompt_tokens": 9, "completion_tokens": 1}}).text
    'Yes'
    >>> parse_chat_completion({"choices": []})
    Traceback (most recent call last):
    ...
    semray.serving.backends.openai.MalformedBodyError: 'choices' is empty
    """
    if not isinstance(payload, dict):
        raise MalformedBodyError(f"the body is a JSON {_kind(payload)}, not an object")
    if "choices" not in payload:
        error = _error_object(payload)
        if error:
            raise MalformedBodyError(f"the body is an error, not a completion: {str(error.get('message'))[:200]}")
        raise MalformedBodyError("the body has no 'choices'")
    choices = payload["choices"]
    if not isinstance(choices, list):
        raise MalformedBodyError(f"'choices' is a {_kind(choices)}, not a list")
    if not choices:
        raise MalformedBodyError("'choices' is empty")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise MalformedBodyError(f"choices[0] is a {_kind(choice)}, not an object")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise MalformedBodyError(f"choices[0].message is {'missing' if message is None else 'a ' + _kind(message)}")
    finish = choice.get("finish_reason") or "stop"
    if not isinstance(finish, str):
        raise MalformedBodyError(f"choices[0].finish_reason is a {_kind(finish)}, not a string")
    input_tokens, output_tokens = _usage(payload.get("usage"))
    text, content_error = _content(message, where)
    tokens, logprob_error = _logprobs(choice.get("logprobs"))
    return RawCompletion(
        text=text,
        token_logprobs=tokens,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finish_reason=finish,
        error=content_error or logprob_error,
    )


def _content(message: dict[str, Any], where: str) -> tuple[str, str | None]:
    content = message.get("content")
    if isinstance(content, str):
        return content, None
    if content is None:
        refusal = message.get("refusal")
        said = f"; refusal: {str(refusal)[:200]}" if refusal else ""
        return "", row_error("empty", f"{where} returned message content null{said}")
    if isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str) for part in content
    ):
        return "".join(part["text"] for part in content), None
    shown = repr(content)[:80]
    raise MalformedBodyError(f"choices[0].message.content is a {_kind(content)} ({shown}), not a string")


def _usage(usage: Any) -> tuple[int, int]:
    if usage is None:
        raise MalformedBodyError(
            "the body has no 'usage' (prompt_tokens, completion_tokens), so the call's cost cannot be counted"
        )
    if not isinstance(usage, dict):
        raise MalformedBodyError(f"'usage' is a {_kind(usage)} ({repr(usage)[:80]}), not an object")
    counts = []
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise MalformedBodyError(f"usage.{name} is {value!r} ({_kind(value)}), not an integer")
        counts.append(value)
    return counts[0], counts[1]


def _logprobs(logprobs: Any) -> tuple[tuple[float, ...], str | None]:
    if logprobs is None:
        return (), None
    content = logprobs.get("content") if isinstance(logprobs, dict) else logprobs
    if content is None:
        return (), None
    if not isinstance(content, list):
        return (), row_error("invalid_logprobs", f"choices[0].logprobs.content is a {_kind(content)}, not a list")
    values: list[float] = []
    for index, token in enumerate(content):
        value = token.get("logprob") if isinstance(token, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return (), row_error("invalid_logprobs", f"token {index} has logprob {value!r}, not a number")
        values.append(float(value))
    return tuple(values), None


def _kind(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _decoded(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return NOT_JSON


def _not_json(response: httpx.Response) -> str:
    kind = response.headers.get("content-type", "no content-type")
    shown = response.text[:80] if response.content else ""
    return f"HTTP {response.status_code} with a body that is not JSON ({kind}): {shown!r}"


def _error_object(payload: Any) -> dict[str, Any]:
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        return error
    return {"message": error} if isinstance(error, str) else {}


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(float(response.headers.get("retry-after", 0)), MAX_RETRY_AFTER_S)
    except ValueError:
        return 0.0
