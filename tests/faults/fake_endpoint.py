"""A scripted OpenAI-compatible server on 127.0.0.1 for the serving fault corpus, and helpers to
call a tier against it (``test_endpoint_faults.py``, ``test_cache_faults.py``; fixtures in
``conftest.py``). No traffic leaves 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from semray.serving.backends.openai import OpenAIBackend
from semray.serving.cache import ResponseCache
from semray.serving.config import TierConfig
from semray.serving.contract import ModelRequest, ModelResponse, OutputConstraint
from semray.serving.tier import ModelTier

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
