"""Fault corpus for the serving layer against a scripted OpenAI-compatible server on 127.0.0.1
(``fake_endpoint.py``).

Families: malformed 200 bodies (a typed ``EndpointResponseError``), per-row reply failures (an
error value with a reason code), impossible values (rejected at the boundary, never charged),
and an endpoint that is down, refuses, is slow or rate-limits (a typed, picklable
``EndpointError`` naming URL, model, status, attempts and a hint). Response-cache faults and
cache identity are ``test_cache_faults.py``.

Every case asserts the error class and that its message names the cause, or the documented
correct result. No traffic leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import pickle
import time
from typing import Any

import pytest
from fake_endpoint import (
    CITY,
    KEY_ENV,
    YES_NO,
    FakeEndpoint,
    Reply,
    ask,
    completion,
    error_body,
    free_port,
    generate,
    openai_tier,
)

from semray.serving.config import Prices
from semray.serving.contract import ERROR_CODES, OutputConstraint
from semray.serving.errors import (
    EndpointAuthError,
    EndpointError,
    EndpointModelError,
    EndpointResponseError,
    EndpointUnavailableError,
    ServingConfigError,
    UnknownModelError,
)
from semray.serving.usage import UsageLedger

pytestmark = pytest.mark.timeout(30)


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


def test_a_run_failed_by_any_row_error_says_what_to_do_about_it() -> None:
    from semray.pipeline.workers.failed_rows import ADVICE, OperatorFailures, first_row_failed, too_many_failed
    from semray.transactions import FailureCount

    without = []
    for code in sorted(ERROR_CODES):
        reasons = (FailureCount(reason=code, rows=5, example=f"{code}: row r1"),)
        message = too_many_failed(OperatorFailures("k", "SemFilter '{t}'", "rows", 5, 5, reasons), 0.1)
        if "To fix: or" in message or ADVICE[code] not in first_row_failed("SemFilter '{t}'", 1, f"{code}: r1"):
            without.append(code)
    assert not without, f"no advice for {without}"
    assert set(ADVICE) == set(ERROR_CODES), "advice for a code the serving layer does not emit"
