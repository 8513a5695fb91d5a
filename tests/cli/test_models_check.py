"""`semray models check` against an OpenAI-compatible server of this test's own on 127.0.0.1:
the context length the server lists, prices the profile does not set, and errors shown whole
(their "[reason, HTTP status]" is text, not rich markup). No Ray, no embedder."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from semray.cli import main
from semray.serving.checking import check_tiers, served_context_length
from semray.serving.profiles import load_profile

pytestmark = pytest.mark.timeout(60)

PROFILE = """
[small]
backend = "openai"
model = "{small}"
base_url = "{url}"
max_retries = 0
timeout_s = 5
prices = {{ input_per_million = 0.5, output_per_million = 1.5 }}

[large]
backend = "openai"
model = "{large}"
base_url = "{url}"
max_retries = 0
timeout_s = 5
"""


class _Server(BaseHTTPRequestHandler):
    """Chat completions for any model but 'locked' (HTTP 401); ``GET /v1/models`` lists 'listed'
    with vLLM's ``max_model_len`` and 'bare' without one."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        models = [{"id": "listed", "object": "model", "max_model_len": 32768}, {"id": "bare", "object": "model"}]
        self._send(200, {"object": "list", "data": models} if self.path == "/v1/models" else {"error": {}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        if body.get("model") == "locked":
            self._send(401, {"error": {"message": "bad key", "type": "invalid_request_error", "code": None}})
            return
        choice = {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "OK"},
            "logprobs": {"content": [{"token": "OK", "logprob": -0.01, "top_logprobs": []}]},
        }
        self._send(200, {"id": "x", "choices": [choice], "usage": {"prompt_tokens": 7, "completion_tokens": 1}})

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _profile(folder: Path, url: str, small: str, large: str) -> Path:
    path = folder / "semray.toml"
    path.write_text(PROFILE.format(url=url, small=small, large=large), encoding="utf-8")
    return path


def test_the_context_length_comes_from_the_servers_model_list(url: str, tmp_path: Path) -> None:
    small, large = check_tiers(load_profile(_profile(tmp_path, url, "listed", "bare")), ("small", "large"))
    assert small.ok and large.ok, (small.status, large.status)
    assert (small.context_length, small.context) == (32768, "32768 (server)")
    assert (large.context_length, large.context) == (None, "-")  # the server does not say: not guessed
    assert served_context_length(url, "unlisted") is None


def test_a_profiles_context_length_wins_over_the_server(url: str, tmp_path: Path) -> None:
    path = _profile(tmp_path, url, "listed", "bare")
    path.write_text(path.read_text().replace('model = "listed"', 'model = "listed"\ncontext_length = 4096'))
    (small,) = check_tiers(load_profile(path), ("small",))
    assert small.context == "4096 (profile)"


def test_prices_the_profile_does_not_set_are_not_shown_as_a_price(url: str, tmp_path: Path) -> None:
    small, large = check_tiers(load_profile(_profile(tmp_path, url, "listed", "bare")), ("small", "large"))
    assert small.prices == "$0.5 in / $1.5 out per 1M tokens"
    assert large.prices == "not set in the profile (counted as $0)"


def test_the_table_shows_an_errors_reason_and_status(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _profile(tmp_path, url, "listed", "locked")
    assert main(["--models", str(path), "models", "check", "--tier", "small", "--tier", "large"]) == 2
    captured = capsys.readouterr()
    table = " ".join(captured.out.replace("│", " ").split())  # the status column wraps over lines
    assert "[unauthorized, HTTP 401]" in table and "api_key_env" in table
    assert "32768 (server)" in table and "not set in the profile" in table
    assert "tier(s) large did not answer" in captured.err


def test_a_vllm_tier_shows_the_serve_proxy_it_is_reached_at(tmp_path: Path) -> None:
    with socket.socket() as probe:  # nothing listens there once closed: no engines are deployed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = tmp_path / "semray.toml"
    path.write_text(
        f'vllm_http_port = {port}\n[large]\nbackend = "vllm"\nmodel = "Qwen/Qwen2.5-7B-Instruct"\n'
        'accelerator_type = "H200"\nnum_gpus = 1\nmax_retries = 0\n',
        encoding="utf-8",
    )
    (large,) = check_tiers(load_profile(path), ("large",))
    assert large.where == f"http://127.0.0.1:{port}/v1 (Serve proxy)"
    assert not large.ok and "[unreachable, no HTTP response]" in large.status
    assert "a vllm tier answers once `semray serve up` has deployed it" in large.status
