"""The HTTP endpoint answers exactly like in-process calls, and fails like a real OpenAI server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from semray.serving.simulator import ChatCompletionRequest, CompletionRequest, Simulator, SimulatorConfig
from semray.serving.simulator.errors import NoLabelError, SimulatorError
from semray.serving.simulator.server import _require_loopback, build_app


@pytest.fixture()
def client(review_config: SimulatorConfig) -> TestClient:
    return TestClient(build_app(Simulator(review_config)))


def _prompts(reviews: pa.Table) -> list[tuple[str, dict[str, Any]]]:
    rows = reviews.to_pylist()
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "age": {"type": "integer"}}}
    return [
        (f"Is this review positive? Answer yes or no.\n{rows[0]['review']}", {}),
        (f"What is the sentiment? {json.dumps(rows[1]['review'])}", {}),
        (f"Rate the stars, thinking step by step. Answer: <1-5>\n{rows[2]['review']}", {}),
        (
            f"Extract buyer. {rows[3]['review']}",
            {"response_format": {"type": "json_schema", "json_schema": {"name": "b", "schema": schema}}},
        ),
        (f"Same city?\n{rows[4]['review']}\n{rows[5]['review']}", {}),
    ]


UNRELATED = "Something unrelated to any review."


def test_http_and_in_process_answers_are_identical(
    client: TestClient, review_config: SimulatorConfig, reviews: pa.Table
) -> None:
    local = Simulator(review_config)
    for prompt, extra in _prompts(reviews):
        body = {
            "model": "sim-small",
            "messages": [{"role": "user", "content": prompt}],
            "logprobs": True,
            "top_logprobs": 2,
            **extra,
        }
        over_http = client.post("/v1/chat/completions", json=body)
        assert over_http.status_code == 200, over_http.text
        in_process = local.complete_sync(ChatCompletionRequest.model_validate(body)).model_dump(mode="json")
        remote = over_http.json()
        assert remote["choices"] == in_process["choices"]
        assert remote["usage"] == in_process["usage"]
        assert remote["simulator"] == in_process["simulator"]
        assert remote["system_fingerprint"] == "semray-simulator"
    # A prompt the labels do not answer: refused the same way in both (HTTP 422, NoLabelError).
    body = {"model": "sim-small", "messages": [{"role": "user", "content": UNRELATED}]}
    assert client.post("/v1/chat/completions", json=body).json()["error"]["code"] == "no_label"
    with pytest.raises(NoLabelError):
        local.complete_sync(ChatCompletionRequest.model_validate(body))


def test_async_and_sync_calls_agree(review_config: SimulatorConfig, reviews: pa.Table) -> None:
    simulator = Simulator(review_config)
    for prompt, extra in _prompts(reviews):
        request = ChatCompletionRequest(model="sim-small", messages=[{"role": "user", "content": prompt}], **extra)
        assert asyncio.run(simulator.complete(request)).choices == simulator.complete_sync(request).choices


def test_models_are_announced_as_simulated(client: TestClient) -> None:
    models = client.get("/v1/models").json()
    assert [card["id"] for card in models["data"]] == ["sim-small", "sim-large"]
    assert all(card["simulated"] and card["owned_by"] == "semray-simulator" for card in models["data"])
    assert models["data"][0]["context_length"] == 400


def test_over_context_is_an_openai_style_400(client: TestClient, reviews: pa.Table) -> None:
    prompt = "Positive? " + " ".join(reviews.column("review").to_pylist())
    response = client.post(
        "/v1/chat/completions", json={"model": "sim-small", "messages": [{"role": "user", "content": prompt}]}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["type"] == "invalid_request_error"
    assert "maximum context length is 400 tokens" in error["message"]


def test_unknown_model_streaming_and_bad_bodies(client: TestClient) -> None:
    message = [{"role": "user", "content": "hi"}]
    unknown = client.post("/v1/chat/completions", json={"model": "gpt-9", "messages": message})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
    streaming = client.post("/v1/chat/completions", json={"model": "sim-small", "messages": message, "stream": True})
    assert streaming.status_code == 400
    assert streaming.json()["error"]["param"] == "stream"
    assert client.post("/v1/chat/completions", json={"messages": message}).status_code == 400


def test_text_completions_with_logprobs(client: TestClient, review_config: SimulatorConfig, reviews: pa.Table) -> None:
    text = reviews.column("review")[6].as_py()
    prompts = [f"Review: {text}\nSentiment:", f"Review: {text}\nIs it positive? Answer yes or no:"]
    body = {"model": "sim-large", "prompt": prompts, "logprobs": 2}
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200
    payload = response.json()
    expected = Simulator(review_config).complete_text_sync(CompletionRequest.model_validate(body))
    assert payload["choices"] == expected.model_dump(mode="json")["choices"]
    sentiment, positive = payload["choices"]
    assert sentiment["text"] == reviews.column("sentiment")[6].as_py()
    assert positive["text"] == ("Yes" if reviews.column("is_positive")[6].as_py() else "No")
    assert len(sentiment["logprobs"]["top_logprobs"][0]) == 2


def test_stats_count_calls_tokens_and_no_matches(client: TestClient, reviews: pa.Table) -> None:
    text = reviews.column("review")[0].as_py()
    for content in (f"Positive? {text}", "Unrelated question", f"Sentiment? {text}"):
        client.post(
            "/v1/chat/completions", json={"model": "sim-large", "messages": [{"role": "user", "content": content}]}
        )
    stats = client.get("/stats").json()
    assert stats["simulated"] is True
    assert stats["calls"] == 3
    assert stats["no_match"] == 1
    assert stats["no_match_rate"] == pytest.approx(1 / 3)
    assert stats["no_label"] == 1  # refused with 422, not charged
    usage = stats["models"]["sim-large"]
    assert (usage["calls"], usage["no_label"]) == (2, 1)
    assert usage["prompt_tokens"] > usage["completion_tokens"] > 0


def test_concurrency_limit_holds_calls_back(
    monkeypatch: pytest.MonkeyPatch, review_config: SimulatorConfig, reviews: pa.Table
) -> None:
    from semray.serving.simulator.config import ModelProfile

    config = review_config.model_copy(update={"models": {"slow": ModelProfile(latency_base_s=1.0, max_concurrency=2)}})
    simulator = Simulator(config)
    in_flight, peak = 0, 0

    async def fake_sleep(seconds: float) -> None:  # counts overlapping waits instead of waiting
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        for _ in range(5):
            await asyncio.sleep(0)
        in_flight -= 1

    monkeypatch.setattr("semray.serving.simulator.simulator._async_sleep", fake_sleep)
    text = reviews.column("review")[0].as_py()
    request = ChatCompletionRequest(model="slow", messages=[{"role": "user", "content": f"Positive? {text}"}])

    async def run_many() -> None:
        await asyncio.gather(*(simulator.complete(request) for _ in range(6)))

    asyncio.run(run_many())
    assert peak == 2


def test_serve_binds_loopback_only() -> None:
    for host in ("127.0.0.1", "localhost", "::1"):
        _require_loopback(host)
    with pytest.raises(SimulatorError, match="loopback only"):
        _require_loopback("0.0.0.0")
