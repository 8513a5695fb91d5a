"""The OpenAI-compatible backend against the simulator's HTTP app on 127.0.0.1, and scripted
transports for retries, concurrency and faults. The API key never shows up in any output."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pyarrow as pa
import pytest
import structlog.testing
import uvicorn

from semray.serving.backends.openai import OpenAIBackend
from semray.serving.config import TierConfig
from semray.serving.contract import ModelRequest, ModelResponse, OutputConstraint
from semray.serving.errors import EndpointUnavailableError, ServingConfigError, UnknownModelError
from semray.serving.simulator import ModelProfile, Simulator, SimulatorConfig, TaskSpec
from semray.serving.simulator.server import build_app
from semray.serving.tier import ModelTier

FAKE_KEY = "sk-semray-FAKE-9f8e7d6c5b4a"
YES_NO = OutputConstraint.choice("Yes", "No")
TEXTS = [
    "the battery died after two days and support never answered my emails at all",
    "wonderful screen and a camera that takes lovely pictures in the evening light",
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    table = pa.table({"id": ["a", "b"], "review": TEXTS, "good": [False, True], "city": ["Oslo", "Lyon"]})
    config = SimulatorConfig.from_labels(
        table,
        key_column="id",
        text_columns=["review"],
        tasks=[
            TaskSpec(name="good", kind="filter", label_column="good", keywords=("positive",)),
            TaskSpec(name="where", kind="extract", fields={"city": "city"}, keywords=("extract", "city")),
        ],
        models={"sim-small": ModelProfile(error_rate=0.0, context_length=400)},
    )
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(build_app(Simulator(config)), host="127.0.0.1", port=port, log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the simulator server did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=10)


def _tier(base_url: str, **overrides: object) -> TierConfig:
    return TierConfig(backend="openai", model="sim-small", base_url=base_url, backoff_s=0.0, **overrides)  # type: ignore[arg-type]


def _generate(tier: TierConfig, requests: list[ModelRequest], **kwargs: object) -> list[ModelResponse]:
    async def go() -> list[ModelResponse]:
        backend = OpenAIBackend(tier, **kwargs)  # type: ignore[arg-type]
        try:
            return await ModelTier("small", tier, backend).generate(requests)
        finally:
            await backend.aclose()

    return asyncio.run(go())


def _filter_requests() -> list[ModelRequest]:
    return [
        ModelRequest(
            prompt=f"Is this review positive? Answer yes or no.\n\n{text}", constraint=YES_NO, request_id=str(i)
        )
        for i, text in enumerate(TEXTS)
    ]


def test_answers_logprobs_and_native_json_over_http(endpoint: str) -> None:
    responses = _generate(_tier(endpoint), _filter_requests())
    assert [r.error for r in responses] == [None, None]
    assert [r.value for r in responses] == ["No", "Yes"]
    assert all(r.token_logprobs and r.confidence and r.usage.input_tokens > 0 for r in responses)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    (extracted,) = _generate(
        _tier(endpoint),
        [ModelRequest(prompt=f"Extract the city.\n\n{TEXTS[1]}", constraint=OutputConstraint.schema(schema))],
    )
    assert extracted.value == {"city": "Lyon"}


def test_server_side_context_limit_is_a_row_error(endpoint: str) -> None:
    long_prompt = "Is this review positive? " + "very " * 300
    (response,) = _generate(_tier(endpoint), [ModelRequest(prompt=long_prompt, constraint=YES_NO)])
    assert response.error_code == "prompt_too_long" and response.value is None


def test_unknown_model_raises_a_clear_error(endpoint: str) -> None:
    with pytest.raises(UnknownModelError, match="sim-huge"):
        _generate(_tier(endpoint).model_copy(update={"model": "sim-huge"}), _filter_requests())


def test_endpoint_down_names_the_url_after_retries() -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    with pytest.raises(EndpointUnavailableError, match=r"127\.0\.0\.1.*after 3 attempts") as caught:
        _generate(_tier(url, max_retries=2), _filter_requests()[:1])
    assert caught.value.url == f"{url}/chat/completions"


_YES = {
    "choices": [
        {
            "message": {"role": "assistant", "content": "Yes"},
            "logprobs": {"content": [{"token": "Yes", "logprob": -0.2}]},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 9, "completion_tokens": 1},
}


def _scripted(statuses: list[int], seen: list[httpx.Request]) -> httpx.MockTransport:
    replies = iter(statuses)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        status = next(replies)
        if status != 200:
            return httpx.Response(status, json={"error": {"message": "busy", "code": None}})
        return httpx.Response(200, json=_YES)

    return httpx.MockTransport(handle)


def test_retries_on_429_and_5xx_then_succeeds() -> None:
    seen: list[httpx.Request] = []
    (response,) = _generate(
        _tier("http://127.0.0.1:9/v1"), _filter_requests()[:1], transport=_scripted([429, 503, 200], seen)
    )
    assert response.value == "Yes" and len(seen) == 3 and response.usage.input_tokens == 9
    body = json.loads(seen[0].content)
    assert body["logprobs"] is True and body["model"] == "sim-small" and body["temperature"] == 0.0


def test_timeouts_are_retried_then_reported_with_the_url() -> None:
    attempts: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        raise httpx.ReadTimeout("read timed out", request=request)

    with pytest.raises(EndpointUnavailableError, match=r"127\.0\.0\.1:9/v1/chat/completions.*timed out after 2\.0s"):
        _generate(
            _tier("http://127.0.0.1:9/v1", timeout_s=2.0, max_retries=2),
            _filter_requests()[:1],
            transport=httpx.MockTransport(handle),
        )
    assert len(attempts) == 3


def test_client_errors_are_row_errors_not_retried() -> None:
    seen: list[httpx.Request] = []
    (response,) = _generate(_tier("http://127.0.0.1:9/v1"), _filter_requests()[:1], transport=_scripted([422], seen))
    assert response.error_code == "model_error" and len(seen) == 1


def test_concurrency_is_limited_per_replica() -> None:
    in_flight, peak = 0, 0

    async def handle(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        for _ in range(20):
            await asyncio.sleep(0)  # yield so that other calls could enter if the limit allowed
        in_flight -= 1
        return httpx.Response(200, json=_YES)

    requests = [ModelRequest(prompt=f"q{i}", constraint=YES_NO) for i in range(12)]
    responses = _generate(
        _tier("http://127.0.0.1:9/v1", max_concurrency=3), requests, transport=httpx.MockTransport(handle)
    )
    assert all(r.value == "Yes" for r in responses) and peak == 3


def test_api_key_is_sent_but_never_logged_or_shown(
    endpoint: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SEMRAY_TEST_KEY", FAKE_KEY)
    seen: list[httpx.Request] = []
    texts: list[str] = []
    with structlog.testing.capture_logs() as events:
        _generate(_tier(endpoint, api_key_env="SEMRAY_TEST_KEY"), _filter_requests())
        _generate(
            _tier("http://127.0.0.1:9/v1", api_key_env="SEMRAY_TEST_KEY"),
            _filter_requests()[:1],
            transport=_scripted([500, 200], seen),
        )
        for failing in (
            lambda: _generate(
                _tier(f"http://127.0.0.1:{_free_port()}/v1", api_key_env="SEMRAY_TEST_KEY", max_retries=1),
                _filter_requests()[:1],
            ),
            lambda: _generate(
                _tier("http://127.0.0.1:9/v1", api_key_env="SEMRAY_TEST_KEY"),
                _filter_requests()[:1],
                transport=_scripted([401], []),
            ),
        ):
            with pytest.raises((EndpointUnavailableError, ServingConfigError)) as caught:
                failing()
            texts.append(str(caught.value) + repr(caught.value))
    assert seen[0].headers["authorization"] == f"Bearer {FAKE_KEY}", "the key is used"
    config = _tier(endpoint, api_key_env="SEMRAY_TEST_KEY")
    backend = OpenAIBackend(config)
    texts += [repr(config), config.model_dump_json(), repr(backend), str(vars(config))]
    captured = capfd.readouterr()
    everything = "\n".join([*texts, json.dumps(events, default=str), captured.out, captured.err])
    assert any(event["event"] == "endpoint_retry" for event in events)
    assert FAKE_KEY not in everything and FAKE_KEY[-8:] not in everything


def test_missing_api_key_env_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEMRAY_TEST_MISSING", raising=False)
    with pytest.raises(ServingConfigError, match="SEMRAY_TEST_MISSING") as missing:
        OpenAIBackend(_tier("http://127.0.0.1:9/v1", api_key_env="SEMRAY_TEST_MISSING"))
    # Where it is missing: a replica on a cluster node reads its node's environment, not the shell's.
    assert "Serve replica reads it from the environment its Ray node was started with" in str(missing.value)


def test_the_simulator_endpoints_no_label_is_a_no_label_row_error(endpoint: str) -> None:
    """`semray sim serve` refuses a row it has no label for with HTTP 422 code no_label: over HTTP
    that is the same per-row `no_label` as in-process (so a failed run's advice is about labels,
    not 'check the endpoint's logs'), not `model_error`."""
    unlabelled = ModelRequest(prompt="Is this review positive? a text the simulator has never seen", constraint=YES_NO)
    (response,) = _generate(_tier(endpoint), [unlabelled])
    assert response.error_code == "no_label" and response.calls == 1
    assert endpoint in str(response.error) and "no label" in str(response.error)


def test_models_check_says_the_simulator_endpoint_serves(endpoint: str) -> None:
    from semray.serving.checking import check_tiers
    from semray.serving.config import ServingConfig

    (check,) = check_tiers(ServingConfig(small=_tier(endpoint)), ("small",))
    assert check.status == "ok (SIMULATED endpoint: answers only rows it has labels for)"


@pytest.mark.parametrize(
    ("key", "echoed", "shown"),
    [
        ("k", "the simulator has no label for this task; key k refused", "for this task; key *** refused"),
        ("k2", "key=k2&tasks", "key=***&tasks"),
        (FAKE_KEY, f"Bearer%20{FAKE_KEY}x", "Bearer%20***x"),  # a real key is cut out wherever it is
    ],
    ids=["one-letter", "short", "long-inside-other-text"],
)
def test_an_echoed_key_is_redacted_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, key: str, echoed: str, shown: str
) -> None:
    monkeypatch.setenv("SEMRAY_TEST_KEY", key)

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(418, json={"error": {"message": echoed, "code": "teapot"}})

    (response,) = _generate(
        _tier("http://127.0.0.1:9/v1", api_key_env="SEMRAY_TEST_KEY"),
        _filter_requests()[:1],
        transport=httpx.MockTransport(handle),
    )
    assert response.error_code == "model_error" and str(response.error).endswith(shown)
