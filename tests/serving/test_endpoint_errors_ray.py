"""An OpenAI-compatible tier's failures as a user of the CLI sees them, on a local Ray: a model
profile in the working directory (``./semray.toml``) points the tiers at this test's own server
on 127.0.0.1; a refused key stops the run with one line naming the URL, the HTTP status and what
to set (not Ray's wrappers), and HTTP 429 answers are retried to a run that succeeds."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from semray.cli import main
from semray.settings import Settings

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

PROFILE = """
cache_enabled = false
app_prefix = "{prefix}"

[large]
backend = "openai"
model = "{model}"
base_url = "{url}"
max_retries = 3
backoff_s = 0
timeout_s = 5
"""
SQL = "SELECT id FROM t WHERE SEM_FILTER('{text} is urgent')"


class _Server(BaseHTTPRequestHandler):
    """Model 'locked': HTTP 401. Model 'busy': HTTP 429 for the first two requests, then answers."""

    protocol_version = "HTTP/1.1"
    posts: ClassVar[list[str]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        with self.lock:
            self.posts.append(body["model"])
            busy = body["model"] == "busy" and self.posts.count("busy") <= 2
        if body["model"] == "locked":
            self._send(401, {"error": {"message": "invalid api key", "type": "invalid_request_error", "code": None}})
        elif busy:
            self._send(429, {"error": {"message": "slow down", "type": "rate_limit", "code": None}})
        else:
            content = json.dumps("Yes") if body.get("response_format") else "Yes"
            choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
            self._send(200, {"id": "x", "choices": [choice], "usage": {"prompt_tokens": 9, "completion_tokens": 1}})

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        if status == 429:
            self.send_header("retry-after", "0")
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


def _workdir(tmp_path: Path, url: str, model: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A working directory holding semray.toml and t.csv; the CLI's arguments for it."""
    (tmp_path / "semray.toml").write_text(PROFILE.format(url=url, model=model, prefix=f"errors-{model}"))
    (tmp_path / "t.csv").write_text("id,text\n1,the server room is on fire\n2,lunch menu\n3,printer jam\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SEMRAY_MODELS", raising=False)
    return ["--state-dir", str(tmp_path / "state"), "sql", SQL, "-t", "t=t.csv", "--format", "csv"]


def test_a_refused_key_stops_the_run_with_the_url_status_and_what_to_set(
    ray_settings: Settings,
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(_workdir(tmp_path, url, "locked", monkeypatch)) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, errors
    (line,) = errors
    assert line.startswith(f"error: model endpoint {url}/chat/completions (model 'locked') refused the API key")
    assert "[unauthorized, HTTP 401] after 1 attempt" in line and "no API key was sent: set api_key_env" in line
    assert "the pipeline failed" not in line and "RayTaskError" not in line and "\x1b" not in line


def test_rate_limited_calls_are_retried_to_a_run_that_succeeds(
    ray_settings: Settings,
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(_workdir(tmp_path, url, "busy", monkeypatch)) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == ["id", "1", "2", "3"]
    assert "model calls: 3," in captured.err  # the 429 answers are retries, not calls
    assert _Server.posts.count("busy") == 5
