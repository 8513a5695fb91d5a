"""``semray ask`` against an OpenAI-compatible endpoint over HTTP, end to end to a validated plan.

The endpoint is a FastAPI server on 127.0.0.1 that answers each agent's prompt (told apart by
its system prompt, as a real model would see it) with the demo recording's answer for that
step, with OpenAI's chat-completion shape and usage. So the whole real-model path runs: the
tier config, the ``openai`` backend with structured output, HTTP, parsing, the loop, the
grammar and semantic validators, and the plan document; only the model's words are recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

import semray
from semray.demo.corpus import write
from semray.operators import plan_from_json, plan_to_json
from semray.serving.config import ServingConfig, TierConfig
from semray.settings import Settings

RECORDING = Path(semray.__file__).parent / "demo" / "ask_delivery.json"
SYSTEM_PREFIXES = {
    "You are the profiling agent": "profiling/choose",
    "You are the planning agent": "planning/outline",
    "You are the manipulation agent": "manipulation/fill",
    "You are a semantic validator": "semantic/judge",
}


class RecordedEndpoint:
    """Answers chat completions from a recording, by the agent the system prompt names."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.answers: dict[str, list[dict[str, Any]]] = recording["answers"]
        self.used: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> JSONResponse:
            return await self.reply(await request.json())

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "planner", "object": "model"}]}

        return app

    async def reply(self, body: dict[str, Any]) -> JSONResponse:
        self.requests.append(body)
        system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
        key = next((k for prefix, k in SYSTEM_PREFIXES.items() if system.startswith(prefix)), None)
        if key is None:
            return JSONResponse({"error": {"message": "no recorded answer", "type": "x"}}, status_code=400)
        answers = self.answers[key]
        answer = answers[min(self.used.get(key, 0), len(answers) - 1)]
        self.used[key] = self.used.get(key, 0) + 1
        text = answer["text"] if "text" in answer else json.dumps(answer["json"])
        return completion(body, text, answer.get("input_tokens", 100), answer.get("output_tokens", 10))


def completion(body: dict[str, Any], text: str, tokens_in: int, tokens_out: int) -> JSONResponse:
    """An OpenAI chat completion answering ``body`` with ``text``."""
    return JSONResponse(
        {
            "id": f"rec-{id(body)}",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": tokens_in,
                "completion_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            },
        }
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def served(recorded: RecordedEndpoint) -> Iterator[str]:
    """``recorded`` served on 127.0.0.1 by uvicorn in a thread; its base URL."""
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(recorded.app(), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the recorded endpoint did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture()
def endpoint() -> Iterator[tuple[str, RecordedEndpoint]]:
    recorded = RecordedEndpoint(json.loads(RECORDING.read_text(encoding="utf-8")))
    with served(recorded) as base_url:
        yield base_url, recorded


def _recorded_plan(reviews: Path) -> str:
    """The recording's plan, with its scan of ``reviews.csv`` resolved to the file ask was given."""
    recording = json.loads(RECORDING.read_text(encoding="utf-8"))
    fill = recording["answers"]["manipulation/fill"][0]
    text = fill["text"] if "text" in fill else json.dumps(fill["json"])
    return plan_to_json(plan_from_json(text.replace('"reviews.csv"', json.dumps(str(reviews.resolve())))))


def test_ask_plans_through_an_openai_compatible_endpoint(
    endpoint: tuple[str, RecordedEndpoint], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, recorded = endpoint
    paths = write(tmp_path / "demo", 60)
    monkeypatch.chdir(tmp_path / "demo")
    serving = ServingConfig(large=TierConfig(backend="openai", model="planner", base_url=base_url, backoff_s=0.0))
    question = json.loads(RECORDING.read_text(encoding="utf-8"))["question"]
    result = semray.ask(
        question,
        tables={"reviews": paths["reviews"], "products": paths["products"]},
        settings=Settings(state_dir=tmp_path / "state"),
        serving=serving,
        dry_run=True,
    )

    assert result.answer is None and result.datasets == ("reviews",)
    assert plan_to_json(plan_from_json(result.plan_json)) == _recorded_plan(paths["reviews"])
    # Every agent reached the endpoint, the structured steps with their JSON schema.
    assert set(recorded.used) == set(SYSTEM_PREFIXES.values())
    structured = [body for body in recorded.requests if "response_format" in body]
    assert structured and all(body["response_format"]["type"] == "json_schema" for body in structured)
    assert all(body["model"] == "planner" for body in recorded.requests)
    # Tokens are the endpoint's usage, and the judges ran as a majority of three.
    fill = next(step for step in result.steps if step.kind == "fill")
    assert (fill.input_tokens, fill.output_tokens) == (4200, 380)
    assert recorded.used["semantic/judge"] == 3


def test_semray_ask_cli_reads_the_endpoint_from_semray_toml(
    endpoint: tuple[str, RecordedEndpoint], tmp_path: Path
) -> None:
    base_url, recorded = endpoint
    write(tmp_path / "demo", 60)
    folder = tmp_path / "demo"
    (folder / "semray.toml").write_text(
        f'[large]\nbackend = "openai"\nmodel = "planner"\nbase_url = "{base_url}"\nbackoff_s = 0.0\n', encoding="utf-8"
    )
    question = json.loads(RECORDING.read_text(encoding="utf-8"))["question"]
    env = {**os.environ, "SEMRAY_STATE_DIR": str(tmp_path / "state")}
    env.pop("SEMRAY_MODELS", None)
    done = subprocess.run(
        [sys.executable, "-m", "semray.cli", "ask", question, "-t", "reviews=reviews.csv", "--dry-run"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    plan = done.stdout[done.stdout.index("{") :].strip()
    assert plan_to_json(plan_from_json(plan)) == _recorded_plan(folder / "reviews.csv")
    assert recorded.used.get("manipulation/fill") == 1


class GatheringEndpoint(RecordedEndpoint):
    """The recorded endpoint, answering profiling sub-agents too (by the dataset their prompt shows), holding each
    draft until ``gather`` drafts are in flight at once: candidates drafted one after another would time out (a
    400, not retried), failing the test; nothing is timed."""

    def __init__(self, recording: dict[str, Any], gather: int) -> None:
        super().__init__(recording)
        self.gather, self.waiting, self.inspected = gather, 0, 0
        self.everyone: Any = None

    async def reply(self, body: dict[str, Any]) -> JSONResponse:
        import asyncio

        system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
        user = next((m["content"] for m in body["messages"] if m["role"] == "user"), "")
        if system.startswith("You are a profiling sub-agent"):
            self.inspected += 1
            needed = "dataset reviews:" in user
            reply = {"relevant": needed, "columns": ["rating"] if needed else [], "notes": "ratings 1 to 5"}
            return completion(body, json.dumps(reply), 300, 20)
        if system.startswith("You are the manipulation agent"):
            self.everyone = self.everyone or asyncio.Event()
            self.waiting += 1
            if self.waiting >= self.gather:
                self.everyone.set()
            try:
                await asyncio.wait_for(self.everyone.wait(), timeout=20)
            except TimeoutError:
                return JSONResponse({"error": {"message": "drafts came one at a time", "type": "x"}}, 400)
        return await super().reply(body)


def test_sub_agents_call_the_endpoint_at_once_over_http(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = GatheringEndpoint(json.loads(RECORDING.read_text(encoding="utf-8")), gather=3)
    paths = write(tmp_path / "demo", 60)
    monkeypatch.chdir(tmp_path / "demo")
    settings = Settings(state_dir=tmp_path / "state", agent_candidates=3, agent_dataset_agents=2, agent_parallelism=3)
    question = json.loads(RECORDING.read_text(encoding="utf-8"))["question"]
    with served(recorded) as base_url:
        serving = ServingConfig(large=TierConfig(backend="openai", model="planner", base_url=base_url, backoff_s=0.0))
        result = semray.ask(
            question,
            tables={"reviews": paths["reviews"], "products": paths["products"]},
            settings=settings,
            serving=serving,
            dry_run=True,
        )
    assert result.datasets == ("reviews",) and recorded.inspected == 2  # one sub-agent per candidate dataset
    assert plan_to_json(plan_from_json(result.plan_json)) == _recorded_plan(paths["reviews"])
    fills = [step for step in result.steps if step.kind == "fill"]
    assert sorted(step.branch for step in fills) == ["candidate-0", "candidate-1", "candidate-2"]
    assert "choose" not in {step.kind for step in result.steps}
