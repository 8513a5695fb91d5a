"""Fault corpus for the serving layer against a scripted OpenAI-compatible server on 127.0.0.1.

Families: malformed 200 bodies (a typed ``EndpointResponseError``), per-row reply failures (an
error value with a reason code), impossible values (rejected at the boundary, never charged),
an endpoint that is down, refuses, is slow or rate-limits (a typed, picklable ``EndpointError``
naming URL, model, status, attempts and a hint), response-cache faults (degrade to misses,
logged once) and cache identity (what changes an answer changes the key).

Every case asserts the error class and that its message names the cause, or the documented
correct result. No traffic leaves 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import structlog.testing

from semray.serving.backends.base import Call, RawCompletion
from semray.serving.backends.openai import OpenAIBackend
from semray.serving.backends.simulated import SimulatedBackend
from semray.serving.cache import ResponseCache
from semray.serving.config import Prices, TierConfig
from semray.serving.contract import ERROR_CODES, ModelRequest, ModelResponse, OutputConstraint
from semray.serving.errors import (
    EndpointAuthError,
    EndpointError,
    EndpointModelError,
    EndpointResponseError,
    EndpointUnavailableError,
    ServingConfigError,
    UnknownModelError,
)
from semray.serving.identity import path_fingerprint
from semray.serving.simulator import ModelProfile, SimulatorConfig, TaskSpec
from semray.serving.tier import ModelTier
from semray.serving.usage import UsageLedger

pytestmark = pytest.mark.timeout(30)

YES_NO = OutputConstraint.choice("Yes", "No")
CITY = OutputConstraint.schema({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
KEY_ENV = "SEMRAY_FAULT_TEST_KEY"


# -- the scripted server ---------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP answer: a status, a body (dict/list: JSON; str/bytes: as is), headers,
    a delay before answering, or ``drop`` (close the connection without answering)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    drop: bool = False


def completion(
    content: Any = "Yes",
    *,
    logprobs: Any = (-0.1,),
    prompt_tokens: Any = 9,
    completion_tokens: Any = 1,
    finish_reason: Any = "stop",
) -> dict[str, Any]:
    """A chat-completion body; ``logprobs`` is a tuple of values, or any raw object to send as is."""
    if isinstance(logprobs, tuple):
        logprobs = {"content": [{"token": f"t{i}", "logprob": value} for i, value in enumerate(logprobs)]}
    return {
        "id": "chatcmpl-fault",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }


def error_body(message: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": code}}


class FakeEndpoint:
    """A real HTTP server on 127.0.0.1 (port 0) answering from a script, recording requests."""

    def __init__(self) -> None:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # the test output stays quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                body = json.loads(raw) if raw else {}
                reply = endpoint.record(self.path, dict(self.headers), body)
                self._answer(reply)

            def do_GET(self) -> None:
                endpoint.record(self.path, dict(self.headers), None)
                if self.path.endswith("/models") and endpoint.models is not None:
                    self._answer(Reply(body={"object": "list", "data": [{"id": m} for m in endpoint.models]}))
                else:
                    self._answer(Reply(status=404, body=error_body("not found")))

            def _answer(self, reply: Reply) -> None:
                if reply.delay_s:
                    endpoint.stopping.wait(reply.delay_s)
                if reply.drop:
                    self.close_connection = True
                    return
                if isinstance(reply.body, dict | list) or reply.body is None:
                    data = json.dumps(reply.body if reply.body is not None else completion()).encode()
                    kind = "application/json"
                else:
                    data = reply.body.encode() if isinstance(reply.body, str) else reply.body
                    kind = reply.headers.get("Content-Type", "text/plain")
                self.send_response(reply.status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    if name != "Content-Type":
                        self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.reset()
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def reset(self) -> None:
        with self._lock:
            self.replies: list[Reply] = [Reply()]
            self.responder: Callable[[dict[str, Any]], Reply] | None = None
            self.models: list[str] | None = None
            self.requests: list[tuple[str, dict[str, str], Any]] = []

    def script(self, *replies: Reply) -> None:
        """Answer with these replies in order; the last one repeats."""
        with self._lock:
            self.replies = list(replies)

    def record(self, path: str, headers: dict[str, str], body: Any) -> Reply:
        with self._lock:
            self.requests.append((path, headers, body))
            if body is None:
                return Reply()
            if self.responder is not None:
                return self.responder(body)
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    @property
    def posts(self) -> int:
        return sum(1 for _, _, body in self.requests if body is not None)

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def server_pool() -> Iterator[list[FakeEndpoint]]:
    servers = [FakeEndpoint(), FakeEndpoint()]
    yield servers
    for server in servers:
        server.close()


@pytest.fixture()
def server(server_pool: list[FakeEndpoint]) -> FakeEndpoint:
    server_pool[0].reset()
    return server_pool[0]


@pytest.fixture()
def other_server(server_pool: list[FakeEndpoint]) -> FakeEndpoint:
    server_pool[1].reset()
    return server_pool[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def openai_tier(url: str, **overrides: Any) -> TierConfig:
    settings: dict[str, Any] = {"backoff_s": 0.0, "max_retries": 2, "timeout_s": 5.0, **overrides}
    return TierConfig(backend="openai", model="fault-model", base_url=url, **settings)


def generate(
    config: TierConfig, requests: list[ModelRequest], cache: ResponseCache | None = None
) -> list[ModelResponse]:
    async def go() -> list[ModelResponse]:
        backend = OpenAIBackend(config)
        try:
            return await ModelTier("small", config, backend, cache).generate(requests)
        finally:
            await backend.aclose()

    return asyncio.run(go())


def ask(constraint: OutputConstraint = YES_NO, prompt: str = "Is the review positive?", **kwargs: Any) -> ModelRequest:
    return ModelRequest(prompt=prompt, constraint=constraint, **kwargs)


# -- 1. malformed 200 bodies: EndpointResponseError naming URL, model, status, what was wrong ----

NOT_JSON = {
    "truncated_json": ('{"choices": [', "text/plain"),
    "plain_text": ("not json at all", "text/plain"),
    "html_page": ("<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html"),
    "empty_body": ("", "application/json"),
    "binary": (b"\x00\xff\xfe garbage", "application/octet-stream"),
    "trailing_garbage": ('{"choices": []} trailing', "application/json"),
    "single_quotes": ("{'choices': []}", "application/json"),
}


@pytest.mark.parametrize("name", sorted(NOT_JSON))
def test_a_body_that_is_not_json_is_retried_then_a_typed_error(server: FakeEndpoint, name: str) -> None:
    body, kind = NOT_JSON[name]
    server.script(Reply(body=body, headers={"Content-Type": kind}))
    with pytest.raises(EndpointResponseError) as caught:
        generate(openai_tier(server.url), [ask()])
    error = caught.value
    assert (error.reason, error.status, error.attempts, error.model) == ("invalid_json", 200, 3, "fault-model")
    assert error.url == f"{server.url}/chat/completions" and server.posts == 3, "retried like a 5xx"
    message = str(error)
    assert server.url in message and "'fault-model'" in message and "HTTP 200" in message and "not JSON" in message


def test_a_body_that_is_not_json_once_is_retried_to_success(server: FakeEndpoint) -> None:
    server.script(Reply(body="<html>oops</html>", headers={"Content-Type": "text/html"}), Reply())
    (response,) = generate(openai_tier(server.url), [ask()])
    assert response.value == "Yes" and server.posts == 2


MALFORMED: dict[str, tuple[Any, str]] = {
    "array_body": ([], "not an object"),
    "string_body": ("just a string", "not an object"),
    "number_body": (42, "not an object"),
    "null_body": (None, "not an object"),
    "boolean_body": (True, "not an object"),
    "no_choices": ({"id": "x", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}, "no 'choices'"),
    "error_object_with_200": (error_body("the engine is overloaded"), "the engine is overloaded"),
    "choices_null": ({"choices": None}, "'choices' is a null"),
    "choices_empty": ({"choices": [], "usage": {}}, "'choices' is empty"),
    "choices_object": ({"choices": {}}, "'choices' is a object"),
    "choices_string": ({"choices": "Yes"}, "'choices' is a string"),
    "choice_null": ({"choices": [None]}, "choices[0] is a null"),
    "choice_number": ({"choices": [1]}, "choices[0] is a number"),
    "message_missing": ({"choices": [{"finish_reason": "stop"}]}, "message is missing"),
    "message_string": ({"choices": [{"message": "Yes"}]}, "message is a string"),
    "finish_reason_number": (
        {**completion(), "choices": [{"message": {"content": "Yes"}, "finish_reason": 5}]},
        "finish_reason",
    ),
    "content_number": (completion(42), "content is a number"),
    "content_float": (completion(4.2), "content is a number"),
    "content_boolean": (completion(True), "content is a boolean"),
    "content_list_of_strings": (completion(["Yes"]), "content is a array"),
    "content_list_of_images": (completion([{"type": "image_url", "image_url": {"url": "x"}}]), "content is a array"),
    "content_object": (completion({"text": "Yes"}), "content is a object"),
    "usage_string": ({**completion(), "usage": "9 tokens"}, "'usage' is a string"),
    "usage_list": ({**completion(), "usage": [9, 1]}, "'usage' is a array"),
    "usage_missing": ({key: v for key, v in completion().items() if key != "usage"}, "no 'usage'"),
    "usage_null": ({**completion(), "usage": None}, "no 'usage'"),
    "prompt_tokens_missing": ({**completion(), "usage": {"completion_tokens": 1}}, "usage.prompt_tokens is None"),
    "prompt_tokens_string": (completion(prompt_tokens="9"), "usage.prompt_tokens is '9'"),
    "prompt_tokens_fraction": (completion(prompt_tokens=9.5), "usage.prompt_tokens is 9.5"),
    "completion_tokens_null": (completion(completion_tokens=None), "usage.completion_tokens is None"),
    "completion_tokens_boolean": (completion(completion_tokens=True), "usage.completion_tokens is True"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_body_that_is_not_a_chat_completion_is_a_typed_error(server: FakeEndpoint, name: str) -> None:
    body, what = MALFORMED[name]
    server.script(Reply(body=json.dumps(body), headers={"Content-Type": "application/json"}))
    with pytest.raises(EndpointResponseError) as caught:
        generate(openai_tier(server.url), [ask()])
    error = caught.value
    assert isinstance(error, EndpointError) and error.reason == "malformed_body" and error.status == 200
    assert server.posts == 1, "a server that does not speak the protocol is not retried"
    message = str(error)
    assert f"{server.url}/chat/completions" in message and "'fault-model'" in message and "HTTP 200" in message
    assert what in message, message
    assert "OpenAI-compatible" in error.hint


def test_content_as_a_list_of_text_parts_is_joined(server: FakeEndpoint) -> None:
    server.script(Reply(body=completion([{"type": "text", "text": "Ye"}, {"type": "text", "text": "s"}])))
    (response,) = generate(openai_tier(server.url), [ask()])
    assert response.value == "Yes" and response.error is None


# -- 2. per-row reply failures: error values with a reason code, never a silent answer ----------

ROW_FAILURES: dict[str, tuple[Reply, OutputConstraint, str, str]] = {
    "empty_text": (Reply(body=completion("")), YES_NO, "empty", "empty"),
    "blank_text": (Reply(body=completion("  \n\t ")), YES_NO, "empty", "empty"),
    "null_content": (Reply(body=completion(None)), YES_NO, "empty", "content null"),
    "null_content_free_text": (Reply(body=completion(None)), OutputConstraint.text(), "empty", "content null"),
    "off_format_choice": (Reply(body=completion("Perhaps")), YES_NO, "unparseable", "Perhaps"),
    "off_format_sentence": (Reply(body=completion("I think it might be")), YES_NO, "unparseable", "not exactly one"),
    "off_format_json": (Reply(body=completion("the city is Oslo")), CITY, "unparseable", "not valid JSON"),
    "json_null": (Reply(body=completion("null")), CITY, "unparseable", "schema"),
    "json_wrong_type": (Reply(body=completion('{"city": 5}')), CITY, "unparseable", "schema"),
    "truncated_choice": (Reply(body=completion("Ye", finish_reason="length")), YES_NO, "truncated", "max_tokens"),
    "truncated_even_if_valid": (Reply(body=completion("Yes", finish_reason="length")), YES_NO, "truncated", "length"),
    "truncated_json": (Reply(body=completion('{"city": "Os', finish_reason="length")), CITY, "truncated", "length"),
    "truncated_text": (
        Reply(body=completion("a summary that", finish_reason="length")),
        OutputConstraint.text(),
        "truncated",
        "length",
    ),
    "one_megabyte_reply": (Reply(body=completion("Yes " * 262_144)), YES_NO, "too_long", "characters"),
    "reply_beyond_max_tokens": (Reply(body=completion("x" * 20_000)), OutputConstraint.text(), "too_long", "ignored"),
    "http_400": (Reply(status=400, body=error_body("unsupported parameter: logprobs")), YES_NO, "http_400", "HTTP 400"),
    "http_400_html": (
        Reply(status=400, body="<html>Bad Request</html>", headers={"Content-Type": "text/html"}),
        YES_NO,
        "http_400",
        "Bad Request",
    ),
    "http_400_context": (
        Reply(status=400, body=error_body("maximum context length is 8", "context_length_exceeded")),
        YES_NO,
        "prompt_too_long",
        "context length",
    ),
    "http_422": (Reply(status=422, body=error_body("schema not supported")), CITY, "model_error", "HTTP 422"),
    "http_413": (Reply(status=413, body=error_body("payload too large")), YES_NO, "model_error", "HTTP 413"),
}


@pytest.mark.parametrize("name", sorted(ROW_FAILURES))
def test_bad_replies_are_typed_row_errors(server: FakeEndpoint, name: str) -> None:
    reply, constraint, code, cause = ROW_FAILURES[name]
    server.script(reply)
    (response,) = generate(openai_tier(server.url), [ask(constraint, max_tokens=16, request_id="row-1")])
    assert response.error_code == code and code in ERROR_CODES, response.error
    assert cause in (response.error or ""), response.error
    assert response.value is None and response.confidence is None and response.request_id == "row-1"
    assert len(response.text) <= 300 or code != "too_long", "a huge reply is not carried along"


def test_an_http_400_row_error_names_the_url_and_model(server: FakeEndpoint) -> None:
    server.script(Reply(status=400, body=error_body("bad request")))
    (response,) = generate(openai_tier(server.url), [ask()])
    assert f"{server.url}/chat/completions" in (response.error or "") and "'fault-model'" in (response.error or "")
    assert server.posts == 1, "a 400 is not retried"


def test_an_empty_or_truncated_reply_gets_the_one_repair_re_ask(server: FakeEndpoint) -> None:
    server.script(Reply(body=completion("", finish_reason="stop")), Reply(body=completion("No")))
    (fixed,) = generate(openai_tier(server.url), [ask()])
    assert fixed.value == "No" and fixed.repaired and fixed.calls == 2
    server.reset()
    server.script(Reply(body=completion("Well, the", finish_reason="length")), Reply(body=completion("Yes")))
    (fixed,) = generate(openai_tier(server.url), [ask()])
    assert fixed.value == "Yes" and fixed.repaired
    assert "cut off" in server.requests[-1][2]["messages"][-1]["content"]


def test_a_failing_row_does_not_fail_its_batch(server: FakeEndpoint) -> None:
    def answer(body: dict[str, Any]) -> Reply:
        prompt = body["messages"][-1]["content"]
        return Reply(status=400, body=error_body("nope")) if "second" in prompt else Reply(body=completion("Yes"))

    server.responder = answer
    first, second = generate(openai_tier(server.url), [ask(prompt="first row?"), ask(prompt="second row?")])
    assert first.value == "Yes" and second.error_code == "http_400"


# -- 3. impossible values: rejected at the boundary, never charged ------------------------------

BAD_LOGPROBS: dict[str, Any] = {
    "positive_five": (5.0,),
    "positive_half": (-0.2, 0.5),
    "positive_beyond_rounding": (0.01,),
    "nan": (float("nan"),),
    "infinity": (float("inf"),),
    "minus_infinity": (-0.1, float("-inf")),
    "string": ("-0.1",),
    "null": (None,),
    "missing_logprob": {"content": [{"token": "Yes"}]},
    "content_not_a_list": {"content": "Yes"},
}


@pytest.mark.parametrize("name", sorted(BAD_LOGPROBS))
def test_impossible_logprobs_are_row_errors(server: FakeEndpoint, name: str) -> None:
    # json.dumps writes NaN and Infinity as the bare tokens some servers send.
    server.script(
        Reply(body=json.dumps(completion(logprobs=BAD_LOGPROBS[name])), headers={"Content-Type": "application/json"})
    )
    (response,) = generate(openai_tier(server.url), [ask()])
    assert response.error_code == "invalid_logprobs", response.error
    assert "logprob" in (response.error or "") and response.confidence is None and response.value is None


@pytest.mark.parametrize(
    ("logprobs", "confidence"),
    [((1e-6,), 1.0), ((0.0,), 1.0), ((-0.2,), 0.8187307530779818), ((1e-5, -0.4), 0.8187307530779818), ((-50.0,), 0.0)],
)
def test_valid_logprobs_give_a_confidence_within_zero_and_one(
    server: FakeEndpoint, logprobs: tuple[float, ...], confidence: float
) -> None:
    server.script(Reply(body=completion(logprobs=logprobs)))
    (response,) = generate(openai_tier(server.url), [ask()])
    assert response.error is None and response.confidence is not None
    assert 0.0 <= response.confidence <= 1.0 and response.confidence == pytest.approx(confidence, abs=1e-6)
    assert all(value <= 0.0 for value in response.token_logprobs), "rounding above 0 is clamped"


BAD_USAGE: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "prompt_tokens_huge": ({"prompt_tokens": 10**30}, {}),
    "prompt_tokens_negative": ({"prompt_tokens": -1}, {}),
    "completion_tokens_negative": ({"completion_tokens": -5}, {}),
    "completion_tokens_huge": ({"completion_tokens": 10**8}, {}),
    "prompt_tokens_just_over_the_default_bound": ({"prompt_tokens": 10**7 + 1}, {}),
    "prompt_tokens_over_ten_contexts": ({"prompt_tokens": 1001}, {"context_length": 100}),
}


@pytest.mark.parametrize("name", sorted(BAD_USAGE))
def test_impossible_token_counts_are_row_errors_and_never_charged(server: FakeEndpoint, name: str) -> None:
    counts, overrides = BAD_USAGE[name]
    server.script(Reply(body=completion(**counts)))
    config = openai_tier(server.url, **overrides)
    (response,) = generate(config, [ask(max_tokens=8)])
    assert response.error_code == "invalid_usage" and "outside 0.." in (response.error or ""), response.error
    assert response.usage.input_tokens == 0 and response.usage.output_tokens == 0 and response.usage.dollars == 0
    ledger = UsageLedger()
    ledger.record("op", response)
    assert ledger.summary().total.input_tokens == 0 and ledger.summary().total.errors == 1


def test_token_counts_within_the_bound_are_charged(server: FakeEndpoint) -> None:
    server.script(Reply(body=completion(prompt_tokens=999, completion_tokens=1)))
    config = openai_tier(server.url, context_length=100, prices=Prices(input_per_million=1.0))
    (response,) = generate(config, [ask(max_tokens=8)])
    assert response.error is None and response.usage.input_tokens == 999 and response.usage.dollars == 999 / 1e6


# -- 6. endpoint down, refusing, slow or rate limiting: a typed, picklable EndpointError --------


def assert_names_everything(error: EndpointError, url: str, status: int | None, attempts: int) -> str:
    message = str(error)
    assert error.url == f"{url}/chat/completions" and error.url in message
    assert error.model == "fault-model" and "'fault-model'" in message
    assert error.status == status and (f"HTTP {status}" if status else "no HTTP response") in message
    assert error.attempts == attempts and f"after {attempts} attempt" in message
    assert error.hint and error.hint in message
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == message and copy.fields() == error.fields()
    return message


def test_connection_refused_names_the_url_and_asks_whether_the_server_runs() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(EndpointUnavailableError) as caught:
        generate(openai_tier(url), [ask()])
    message = assert_names_everything(caught.value, url, None, 3)
    assert caught.value.reason == "unreachable" and f"is the server running at {url}" in message


def test_a_slow_server_times_out_with_the_url_and_attempts(server: FakeEndpoint) -> None:
    server.script(Reply(delay_s=3.0))
    with pytest.raises(EndpointUnavailableError) as caught:
        generate(openai_tier(server.url, timeout_s=0.3, max_retries=1), [ask()])
    message = assert_names_everything(caught.value, server.url, None, 2)
    assert caught.value.reason == "timeout" and "timed out after 0.3s" in message and "timeout_s" in message


def test_a_slow_server_within_the_timeout_answers(server: FakeEndpoint) -> None:
    server.script(Reply(delay_s=0.2))
    (response,) = generate(openai_tier(server.url, timeout_s=5.0), [ask()])
    assert response.value == "Yes"


def test_a_dropped_connection_is_retried_then_reported(server: FakeEndpoint) -> None:
    server.script(Reply(drop=True))
    with pytest.raises(EndpointUnavailableError) as caught:
        generate(openai_tier(server.url), [ask()])
    assert_names_everything(caught.value, server.url, None, 3)
    assert caught.value.reason == "unreachable" and server.posts == 3


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_names_the_env_var_not_the_key(
    server: FakeEndpoint, status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-fault-SECRET-123")
    server.script(Reply(status=status, body=error_body("Incorrect API key provided: sk-fault-SECRET-123")))
    with pytest.raises(EndpointAuthError) as caught:
        generate(openai_tier(server.url, api_key_env=KEY_ENV), [ask()])
    message = assert_names_everything(caught.value, server.url, status, 1)
    assert isinstance(caught.value, ServingConfigError) and caught.value.reason == "unauthorized"
    assert KEY_ENV in message and "SECRET" not in message and "SECRET" not in repr(caught.value.fields())
    assert server.posts == 1, "a refused key is not retried"


def test_a_refusal_without_a_key_says_to_set_api_key_env(server: FakeEndpoint) -> None:
    server.script(Reply(status=401, body=error_body("missing key")))
    with pytest.raises(EndpointAuthError, match="set api_key_env"):
        generate(openai_tier(server.url), [ask()])


def test_an_unknown_model_lists_what_the_server_serves(server: FakeEndpoint) -> None:
    server.models = ["llama-3-8b", "qwen-7b"]
    server.script(Reply(status=404, body=error_body("The model `fault-model` does not exist", "model_not_found")))
    with pytest.raises(EndpointModelError) as caught:
        generate(openai_tier(server.url), [ask()])
    message = assert_names_everything(caught.value, server.url, 404, 1)
    assert isinstance(caught.value, UnknownModelError) and caught.value.available == ("llama-3-8b", "qwen-7b")
    assert "llama-3-8b, qwen-7b" in message and "fix 'model'" in message


def test_an_unknown_model_without_a_model_list(server: FakeEndpoint) -> None:
    server.script(Reply(status=404, body=error_body("model not found")))
    with pytest.raises(EndpointModelError) as caught:
        generate(openai_tier(server.url), [ask()])
    assert caught.value.available == () and caught.value.reason == "unknown_model"


def test_a_wrong_route_says_to_check_base_url(server: FakeEndpoint) -> None:
    server.script(Reply(status=404, body="<html>Not Found</html>", headers={"Content-Type": "text/html"}))
    with pytest.raises(EndpointUnavailableError) as caught:
        generate(openai_tier(server.url), [ask()])
    message = assert_names_everything(caught.value, server.url, 404, 1)
    assert caught.value.reason == "not_found" and "check base_url" in message


@pytest.mark.parametrize(
    "statuses",
    [(429, 200), (429, 429, 200), (503, 200), (500, 429, 200), (502, 200), (504, 200), (408, 200)],
    ids=lambda statuses: "-".join(map(str, statuses)),
)
def test_transient_statuses_are_retried_to_success(server: FakeEndpoint, statuses: tuple[int, ...]) -> None:
    server.script(*(Reply(status=s, body=error_body("busy")) if s != 200 else Reply() for s in statuses))
    (response,) = generate(openai_tier(server.url), [ask()])
    assert response.value == "Yes" and server.posts == len(statuses)


@pytest.mark.parametrize(("status", "reason"), [(429, "rate_limited"), (500, "server_error"), (503, "server_error")])
def test_persistent_transient_statuses_are_a_typed_error(server: FakeEndpoint, status: int, reason: str) -> None:
    server.script(Reply(status=status, body=error_body("try later")))
    with pytest.raises(EndpointUnavailableError) as caught:
        generate(openai_tier(server.url), [ask()])
    message = assert_names_everything(caught.value, server.url, status, 3)
    assert caught.value.reason == reason and "try later" in message


def test_retry_after_is_honoured(server: FakeEndpoint) -> None:
    server.script(Reply(status=429, body=error_body("slow down"), headers={"Retry-After": "0.3"}), Reply())
    started = time.monotonic()
    (response,) = generate(openai_tier(server.url), [ask()])
    assert response.value == "Yes" and server.posts == 2 and time.monotonic() - started >= 0.3


@pytest.mark.parametrize(
    "error",
    [
        EndpointUnavailableError("http://127.0.0.1:1/v1/chat/completions", "m", "timeout", "timed out", attempts=5),
        EndpointAuthError("http://127.0.0.1:1/v1/chat/completions", "m", "unauthorized", "HTTP 401", status=401),
        EndpointModelError("http://127.0.0.1:1/v1/chat/completions", "m", "unknown_model", "x", available=("a",)),
        EndpointResponseError("http://127.0.0.1:1/v1/chat/completions", "m", "malformed_body", "no choices"),
        EndpointError("http://127.0.0.1:1/v1/chat/completions", "m", "server_error", "HTTP 500", status=500),
    ],
    ids=lambda error: type(error).__name__,
)
def test_every_endpoint_error_survives_a_pickle_round_trip(error: EndpointError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and copy.fields() == error.fields() and str(copy) == str(error)
    assert isinstance(copy, EndpointError) and copy.args == error.args


def test_an_endpoint_error_inside_rays_task_error_keeps_its_fields() -> None:
    from ray.exceptions import RayTaskError  # the wrapper only: no cluster is started

    error = EndpointUnavailableError(
        "http://127.0.0.1:1/v1/chat/completions", "m", "unreachable", "ConnectError: refused", attempts=3
    )
    wrapped = pickle.loads(pickle.dumps(RayTaskError("generate", "Traceback (most recent call last): ...", error)))
    assert isinstance(wrapped.cause, EndpointUnavailableError) and wrapped.cause.fields() == error.fields()
    dual = wrapped.as_instanceof_cause()
    assert isinstance(dual, EndpointError) and dual.url == error.url and dual.attempts == 3


# -- 4. cache faults: a broken cache is a miss, logged once, never a failed run ---------------


class CountingBackend:
    """Answers 'Yes' to everything and counts calls."""

    native_json = True

    def __init__(self, identity: str = "counting") -> None:
        self.model = "counting"
        self.context_length: int | None = None
        self.default_prices = Prices()
        self.identity = identity
        self.calls = 0

    async def complete(self, calls: Sequence[Call]) -> list[RawCompletion]:
        self.calls += len(calls)
        return [RawCompletion(text="Yes", token_logprobs=(-0.1,), input_tokens=5, output_tokens=1) for _ in calls]

    async def aclose(self) -> None:
        return None


COUNTING = TierConfig(backend="simulated", model="counting")


def run_twice(cache: ResponseCache, backend: CountingBackend) -> tuple[list[ModelResponse], list[ModelResponse]]:
    tier = ModelTier("small", COUNTING, backend, cache)
    first = asyncio.run(tier.generate([ask(prompt="cache fault one?"), ask(prompt="cache fault two?")]))
    second = asyncio.run(tier.generate([ask(prompt="cache fault one?"), ask(prompt="cache fault three?")]))
    return first, second


def garbage_file(path: Path) -> Callable[[], None]:
    path.write_bytes(b"\x00\x01 this is not an SQLite database \xff" * 200)
    return lambda: None


def directory_in_place(path: Path) -> Callable[[], None]:
    path.mkdir()
    return lambda: None


def parent_is_a_file(path: Path) -> Callable[[], None]:
    path.parent.rmdir()
    path.parent.write_text("a file where the cache folder should be")
    return lambda: None


def locked_rollback_database(path: Path) -> Callable[[], None]:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE other (x)")
    holder.execute("BEGIN EXCLUSIVE")
    return holder.close


def locked_wal_database(path: Path) -> Callable[[], None]:
    ResponseCache(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO responses VALUES ('held', 'm', 0, '{}')")
    return holder.close


def read_only_file(path: Path) -> Callable[[], None]:
    seed = ResponseCache(path)
    seed.close()
    # Leave only the main file (no -wal/-shm), then make it unwritable, even for root.
    sqlite3.connect(path).execute("PRAGMA journal_mode=DELETE").connection.close()
    os.chmod(path, 0o444)
    immutable = os.geteuid() == 0 and subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
    if os.geteuid() == 0 and not immutable:
        pytest.skip("running as root without chattr: a read-only file cannot be made")

    def undo() -> None:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=False)
        os.chmod(path, 0o644)

    return undo


CACHE_FAULTS: dict[str, Callable[[Path], Callable[[], None]]] = {
    "garbage_bytes": garbage_file,
    "directory_in_its_place": directory_in_place,
    "parent_is_a_file": parent_is_a_file,
    "locked_exclusive_rollback_journal": locked_rollback_database,
    "locked_exclusive_wal_writer": locked_wal_database,
    "read_only_file": read_only_file,
}


@pytest.mark.parametrize("name", sorted(CACHE_FAULTS))
def test_a_broken_cache_degrades_to_misses_logged_once(tmp_path: Path, name: str) -> None:
    path = tmp_path / "cache" / "responses.sqlite"
    path.parent.mkdir()
    undo = CACHE_FAULTS[name](path)
    try:
        with structlog.testing.capture_logs() as events:
            cache = ResponseCache(path, timeout_s=0.2)
            backend = CountingBackend()
            first, second = run_twice(cache, backend)
            assert len(cache) >= 0
            cache.close()
    finally:
        undo()
    assert [r.value for r in first + second] == ["Yes"] * 4 and all(r.error is None for r in first + second)
    assert backend.calls == 4, "nothing was served from (or stored in) the broken cache"
    warnings = [event for event in events if event["event"] == "response_cache_unavailable"]
    assert len(warnings) == 1, events
    assert warnings[0]["path"] == str(path.resolve()) and warnings[0]["error"] and warnings[0]["log_level"] == "warning"
    assert cache.failure is not None and not cache.available


@pytest.mark.parametrize(
    "stored",
    ["{not json", json.dumps({"text": "Yes", "value": "Yes", "confidence": 148.0}), "null"],
    ids=["not_json", "confidence_148", "json_null"],
)
def test_an_unreadable_cache_entry_is_a_miss(tmp_path: Path, stored: str) -> None:
    path = tmp_path / "responses.sqlite"
    backend = CountingBackend()
    tier = ModelTier("small", COUNTING, backend, ResponseCache(path))
    asyncio.run(tier.generate([ask(prompt="entry?")]))
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE responses SET response = ?", (stored,))
    with structlog.testing.capture_logs() as events:
        (again,) = asyncio.run(tier.generate([ask(prompt="entry?")]))
    assert again.value == "Yes" and not again.cache_hit and backend.calls == 2
    assert any(event["event"] == "response_cache_entry_unreadable" for event in events)


def test_a_working_cache_still_hits(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "responses.sqlite", timeout_s=0.2)
    backend = CountingBackend()
    _, second = run_twice(cache, backend)
    assert backend.calls == 3 and second[0].cache_hit and cache.available and len(cache) == 3


# -- 5. cache identity: whatever can change an answer changes the key ------------------------

REVIEWS = [
    "the battery died after two days and support never answered my emails at all",
    "wonderful screen and a camera that takes lovely pictures in the evening light",
]


def simulator(
    *, seed: int = 3, error_rate: float = 0.2, good: tuple[bool, bool] = (False, True), latency: float = 0.0
) -> SimulatorConfig:
    table = pa.table({"id": ["a", "b"], "review": REVIEWS, "good": list(good)})
    return SimulatorConfig.from_labels(
        table,
        key_column="id",
        text_columns=["review"],
        tasks=[TaskSpec(name="good", kind="filter", label_column="good", keywords=("positive",))],
        models={
            "sim-small": ModelProfile(error_rate=error_rate, context_length=4096, latency_base_s=latency),
            "sim-large": ModelProfile(error_rate=0.0),
        },
        seed=seed,
    )


def simulated_hit(cache: ResponseCache, first: SimulatorConfig, second: SimulatorConfig) -> bool:
    config = TierConfig(backend="simulated", model="sim-small")
    request = ask(prompt=f"Is this review positive? Answer yes or no.\n\n{REVIEWS[1]}")
    asyncio.run(ModelTier("small", config, SimulatedBackend(config, first), cache).generate([request]))
    (again,) = asyncio.run(ModelTier("small", config, SimulatedBackend(config, second), cache).generate([request]))
    return again.cache_hit


@pytest.mark.parametrize(
    ("changed", "expect_hit"),
    [
        ({}, True),
        ({"seed": 4}, False),
        ({"error_rate": 0.5}, False),
        ({"good": (True, False)}, False),
        ({"latency": 0.001}, True),  # latency changes no answer
    ],
    ids=["identical", "seed", "profile_error_rate", "tables", "latency_only"],
)
def test_simulator_configuration_is_part_of_the_key(tmp_path: Path, changed: dict[str, Any], expect_hit: bool) -> None:
    cache = ResponseCache(tmp_path / "responses.sqlite")
    assert simulated_hit(cache, simulator(), simulator(**changed)) is expect_hit


def test_another_models_profile_does_not_change_the_key(tmp_path: Path) -> None:
    base = simulator()
    other = base.model_copy(update={"models": {**base.models, "sim-large": ModelProfile(error_rate=0.9)}})
    assert simulated_hit(ResponseCache(tmp_path / "responses.sqlite"), base, other)


def openai_hit(cache: ResponseCache, first: TierConfig, second: TierConfig, request: ModelRequest) -> bool:
    generate(first, [request], cache)
    (again,) = generate(second, [request], cache)
    return again.cache_hit


@pytest.mark.parametrize(
    "change",
    ["identical", "model", "base_url", "temperature", "max_tokens", "logprobs", "native_schema", "prompt_version"],
)
def test_endpoint_configuration_and_sampling_are_part_of_the_key(
    tmp_path: Path,
    server: FakeEndpoint,
    other_server: FakeEndpoint,
    change: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server.responder = other_server.responder = lambda body: Reply(body=completion('{"city": "Oslo"}'))
    cache = ResponseCache(tmp_path / "responses.sqlite")
    first = openai_tier(server.url)
    second = first
    request = ask(CITY, prompt="Extract the city: a trip to Oslo")
    asked = request
    if change == "model":
        second = first.model_copy(update={"model": "other-model"})
    elif change == "base_url":
        second = first.model_copy(update={"base_url": other_server.url})
    elif change == "native_schema":
        second = first.model_copy(update={"native_structured_output": False})
    elif change == "temperature":
        asked = request.model_copy(update={"temperature": 0.7})
    elif change == "max_tokens":
        asked = request.model_copy(update={"max_tokens": 100})
    elif change == "logprobs":
        asked = request.model_copy(update={"logprobs": False})
    generate(first, [request], cache)
    if change == "prompt_version":
        monkeypatch.setattr("semray.serving.tier.PROMPT_VERSION", "serving-prompts/test")
    (again,) = generate(second, [asked], cache)
    assert again.error is None and again.value == {"city": "Oslo"}
    assert again.cache_hit is (change == "identical")


def test_backend_kind_is_part_of_the_key(tmp_path: Path, server: FakeEndpoint) -> None:
    cache = ResponseCache(tmp_path / "responses.sqlite")
    request = ask(prompt=f"Is this review positive? Answer yes or no.\n\n{REVIEWS[1]}")
    simulated = TierConfig(backend="simulated", model="sim-small")
    asyncio.run(ModelTier("small", simulated, SimulatedBackend(simulated, simulator()), cache).generate([request]))
    (again,) = generate(openai_tier(server.url).model_copy(update={"model": "sim-small"}), [request], cache)
    assert not again.cache_hit and server.posts == 1


@pytest.mark.parametrize("change", ["identical", "model_path", "weights", "engine_kwargs"])
def test_local_weights_are_part_of_the_key(tmp_path: Path, change: str) -> None:
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"weights v1")
    cache = ResponseCache(tmp_path / "responses.sqlite")
    config = TierConfig(backend="hf", model="local", model_path=weights)
    request = ask(prompt="weights?")
    backend = CountingBackend(identity=f"hf:{path_fingerprint(weights)}")
    asyncio.run(ModelTier("small", config, backend, cache).generate([request]))
    second_config = config
    if change == "model_path":
        moved = tmp_path / "weights-copy"
        moved.mkdir()
        (moved / "model.safetensors").write_bytes(b"weights v1")
        second_config = config.model_copy(update={"model_path": moved})
    elif change == "weights":
        (weights / "model.safetensors").write_bytes(b"weights v2")
    elif change == "engine_kwargs":
        second_config = config.model_copy(update={"engine_kwargs": {"quantization": "awq"}})
    second_backend = CountingBackend(identity=f"hf:{path_fingerprint(weights)}")
    (again,) = asyncio.run(ModelTier("small", second_config, second_backend, cache).generate([request]))
    assert again.cache_hit is (change == "identical")
