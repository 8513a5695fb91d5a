"""The scorer tier through an endpoint's prompt logprobs: a fake OpenAI-compatible ``/v1/completions`` on 127.0.0.1.

The fake server splits a prompt into tokens (runs of spaces, runs of the rest) and gives each token a logprob
computed from the text before it by a rule, echoing the prompt's tokens with their logprobs as vLLM does (the
first one ``null``, one generated token after them). A local scorer applying the same rule to the same tokens
returns the same numbers, so the planning loop must make the same decisions with either: the same exploration
stop, the same dataset choice, the same weak spans sent back, the same plan.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import QUESTION, catalog_of, choose, gold_document, outline, plan, recorded
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from test_agents_endpoint import served

from semray.asking import ask
from semray.planner.agents import plan_question
from semray.planner.agents.confidence import decision_divergence
from semray.planner.agents.loop import LoopConfig
from semray.planner.agents.scorer_tier import EndpointScorer, scorer_for
from semray.planner.agents.units import UnitPolicy
from semray.serving.config import ServingConfig, TierConfig
from semray.serving.errors import EndpointAuthError, EndpointUnavailableError, PromptLogprobsError, ServingConfigError
from semray.serving.profiles import load_profile
from semray.settings import Settings

OPS = ("scan", "join", "aggregate")
TOKEN = re.compile(r"\s+|\S+")
KEY = "sk-scorer-s3cret-1234"
Rule = Callable[[str, str], float]


def rule(prefix: str, token: str) -> float:
    """The probability of ``token`` after ``prefix``: spans weakly grounded, exploration stopping before weather."""
    if "In the plan answering it" in prefix:
        return 0.6 if "What the data exploration found:" in prefix else 0.3  # span divergence 0.3 < 0.50
    if "Observations of the data:" in prefix:
        seen = prefix.partition("Observations of the data:\n")[2]
        earlier = seen.rsplit("\n\n", 1)[0] if "\n\n" in seen else ""  # earlier observations end in a blank line
        return 0.9 if "dataset products" in earlier else 0.3  # after products, weather adds little (0.6 > 0.45)
    if "Datasets to use:" in prefix:
        return 0.05 if "weather" in (prefix + token).rsplit("Datasets to use:", 1)[1] else 0.8
    return 0.5


class LocalRuleScorer:
    """A local scorer with the server's tokens and rule: ``token_logprobs`` of the continuation's tokens."""

    def __init__(self, probability: Rule) -> None:
        self.probability = probability
        self.calls = 0

    def token_logprobs(self, context: str, continuation: str) -> tuple[float, ...]:
        self.calls += 1
        values = []
        for match in TOKEN.finditer(continuation):
            values.append(math.log(self.probability(context + continuation[: match.start()], match.group())))
        return tuple(values)


class LogprobServer:
    """``POST /v1/completions`` echoing the prompt with the rule's logprobs; ``mode`` breaks it on purpose."""

    def __init__(self, probability: Rule, mode: str = "ok") -> None:
        self.probability, self.mode = probability, mode
        self.requests: list[dict[str, Any]] = []
        self.keys: list[str] = []

    def app(self) -> FastAPI:
        app = FastAPI()
        if self.mode == "chat_only":
            return app  # no /v1/completions: a server that cannot score

        @app.post("/v1/completions")
        async def completions(request: Request) -> JSONResponse:
            body = await request.json()
            self.requests.append(body)
            self.keys.append(request.headers.get("authorization", ""))
            if request.headers.get("authorization") != f"Bearer {KEY}":
                return JSONResponse({"error": {"message": "invalid API key", "type": "auth"}}, status_code=401)
            if self.mode == "reject":
                return JSONResponse({"error": {"message": "echo is not supported", "type": "x"}}, status_code=400)
            return JSONResponse(self.completion(body))

        return app

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["prompt"]
        tokens = [match.group() for match in TOKEN.finditer(prompt)]
        starts = [match.start() for match in TOKEN.finditer(prompt)]
        pairs = zip(starts[1:], tokens[1:], strict=True)
        values: list[float | None] = [None] + [math.log(self.probability(prompt[:at], token)) for at, token in pairs]
        logprobs: dict[str, Any] | None = {
            "tokens": [*tokens, " x"],
            "token_logprobs": [*values, -1.0],
            "top_logprobs": None,
            "text_offset": [*starts, len(prompt)],
        }
        if self.mode == "no_logprobs":
            logprobs = None
        if self.mode == "no_echo":
            logprobs = {"tokens": [" x"], "token_logprobs": [-1.0], "top_logprobs": None, "text_offset": [0]}
        return {
            "id": "cmpl-1",
            "object": "text_completion",
            "model": body["model"],
            "choices": [{"index": 0, "text": prompt + " x", "logprobs": logprobs, "finish_reason": "length"}],
            "usage": {"prompt_tokens": len(tokens), "completion_tokens": 1, "total_tokens": len(tokens) + 1},
        }


def tier(base_url: str) -> TierConfig:
    return TierConfig(backend="openai", model="scorer", base_url=base_url, api_key_env="SCORER_KEY", backoff_s=0.0)


def planned(tmp_path: Path, scorer: Any) -> Any:
    catalog = catalog_of(tmp_path)
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog)), plan(gold_document(catalog))],
    )
    config = LoopConfig(max_iterations=3, semantic=False, units=UnitPolicy())  # the design's thresholds
    return plan_question(QUESTION, catalog=catalog, model=model, config=config, scorer=scorer)


def decisions(result: Any) -> list[tuple[str, str, str, str | None]]:
    return [(step.agent, step.kind, step.output, step.error) for step in result.trace.steps]


def test_an_endpoints_prompt_logprobs_make_the_same_decisions_as_a_local_scorer_of_the_same_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCORER_KEY", KEY)
    local = LocalRuleScorer(rule)
    by_local = planned(tmp_path, local)
    server = LogprobServer(rule)
    context = f"Question: {QUESTION}\nCandidate datasets: reviews, products, weather\nReason: none\nDatasets to use:"
    with served(server) as base_url:  # type: ignore[arg-type]
        scorer = EndpointScorer(tier(base_url))
        by_endpoint = planned(tmp_path, scorer)
        planning_calls = len(server.requests)
        # A decision among options (the profile unit's check when exploration leaves alternatives): the same margin.
        weak = decision_divergence(scorer, context, " weather", (" reviews, products",))
        scorer.close()
    assert weak == decision_divergence(LocalRuleScorer(rule), context, " weather", (" reviews, products",))
    assert weak.margin < -0.5 < 0.25  # the executed choice far below its alternative: a retry

    # Every signal triggered as the rule says, with either scorer.
    explore = next(step for step in by_local.trace.steps if step.kind == "explore")
    assert "stopped before weather" in explore.output  # exploration stopped early
    spans = [step for step in by_local.trace.steps if step.kind == "spans"]
    assert spans[0].error is not None and "largest span divergence 0.300" in spans[0].error  # a retry
    assert by_local.iterations == 2
    # The endpoint made the same decisions from the same numbers: every step's output (scores to 3 decimals).
    assert decisions(by_endpoint) == decisions(by_local)
    assert by_endpoint.plan_json == by_local.plan_json and by_endpoint.datasets == by_local.datasets
    assert planning_calls == local.calls
    body = server.requests[0]
    assert (body["echo"], body["logprobs"], body["max_tokens"], body["temperature"]) == (True, 1, 1, 0.0)
    assert set(server.keys) == {f"Bearer {KEY}"}  # the key of the env var the profile names


def test_a_profile_names_the_endpoint_scorer_and_the_settings_path_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCORER_KEY", KEY)
    profile = tmp_path / "semray.toml"
    profile.write_text(
        '[scorer]\nbackend = "openai"\nmodel = "scorer"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "SCORER_KEY"\n',
        encoding="utf-8",
    )
    serving = load_profile(profile)
    assert serving.scorer is not None and serving.scorer.base_url == "http://127.0.0.1:9/v1"
    assert isinstance(scorer_for(Settings(), serving), EndpointScorer)
    assert scorer_for(Settings(), ServingConfig()) is None
    local = tmp_path / "hf-scorer"
    profile.write_text(f'[scorer]\nbackend = "hf"\nmodel = "tiny"\nmodel_path = "{local.name}"\n', encoding="utf-8")
    assert load_profile(profile).scorer.model_path == local  # type: ignore[union-attr]  # relative to the profile
    simulated = ServingConfig(scorer=TierConfig(backend="simulated", model="sim-small"))
    with pytest.raises(ServingConfigError, match=r'backend = "openai".*backend = "hf" with model_path'):
        scorer_for(Settings(), simulated)
    monkeypatch.delenv("SCORER_KEY")
    with pytest.raises(ServingConfigError, match="environment variable SCORER_KEY"):
        scorer_for(Settings(), serving)


@pytest.mark.parametrize(
    ("mode", "error", "message"),
    [
        ("no_logprobs", PromptLogprobsError, r"logprobs is missing \(null\).*echoes the prompt with token logprobs"),
        ("no_echo", PromptLogprobsError, r"1 token logprob\(s\) came back for a prompt of \d+ tokens.*not echoed"),
        ("reject", PromptLogprobsError, r"HTTP 400: echo is not supported.*does not take an echoed prompt"),
        ("chat_only", EndpointUnavailableError, r"HTTP 404.*prompt scoring needs the legacy /v1/completions"),
    ],
)
def test_an_endpoint_that_cannot_score_is_refused_at_first_use_naming_url_status_and_what_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, error: type[Exception], message: str
) -> None:
    monkeypatch.setenv("SCORER_KEY", KEY)
    server = LogprobServer(rule, mode)
    with served(server) as base_url:  # type: ignore[arg-type]
        scorer = EndpointScorer(tier(base_url))
        with pytest.raises(error, match=message) as raised:
            planned(tmp_path, scorer)
        scorer.close()
    assert f"{base_url}/completions" in str(raised.value) and len(server.requests) <= 1


def test_a_refused_key_names_the_env_var_and_never_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCORER_KEY", "sk-wrong-key-5678")
    with served(LogprobServer(rule)) as base_url:  # type: ignore[arg-type]
        scorer = EndpointScorer(tier(base_url))
        with pytest.raises(EndpointAuthError) as raised:
            scorer.token_logprobs("Question: q\nDatasets to use:", " reviews")
        scorer.close()
    text = str(raised.value)
    assert "HTTP 401" in text and "SCORER_KEY" in text and f"{base_url}/completions" in text
    assert "sk-wrong-key-5678" not in text


def test_ask_scores_through_the_profiles_scorer_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_fixtures import write_data

    monkeypatch.setenv("SCORER_KEY", KEY)
    tables = write_data(tmp_path)
    catalog = catalog_of(tmp_path)
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog)), plan(gold_document(catalog))],
    )
    server = LogprobServer(rule)
    with served(server) as base_url:  # type: ignore[arg-type]
        result = ask(
            QUESTION,
            tables=tables,
            model=model,
            settings=Settings(state_dir=tmp_path / "state"),
            serving=ServingConfig(scorer=tier(base_url)),
            config=LoopConfig(semantic=False),
            dry_run=True,
        )
    assert result.iterations == 2 and server.requests  # the weak spans sent the first draft back
    assert any(step.kind == "spans" and step.error for step in result.steps)


# -- journaled scorer calls: a resumed ask does not pay the endpoint twice ---------------------------------------


def _ask_with_scorer(tmp_path: Path, base_url: str, fills: int, state: Path) -> Any:
    from agent_fixtures import write_data

    tables = write_data(tmp_path / "data")
    catalog = catalog_of(tmp_path / "data")
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog)) for _ in range(fills)],
    )
    return ask(
        QUESTION,
        tables=tables,
        model=model,
        settings=Settings(state_dir=state),
        serving=ServingConfig(scorer=tier(base_url)),
        config=LoopConfig(semantic=False),
        dry_run=True,
    )


def test_a_resumed_ask_does_not_score_again_what_its_committed_units_scored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ask stopped in its plan unit (the model's recording runs out: the trace stays unfinished, as after a
    kill) resumes without sending the endpoint the prompts its committed profile unit scored; the resumed ask
    sends exactly the uninterrupted ask's prompts after those, and reaches the same plan."""
    from semray.planner.agents.ask_journal import ASKS_FOLDER, ScoreJournaled, read_ask_trace, render_ask_trace
    from semray.planner.agents.recorded import RecordingExhaustedError

    (tmp_path / "data").mkdir()
    monkeypatch.setenv("SCORER_KEY", KEY)
    server = LogprobServer(rule)
    with served(server) as base_url:  # type: ignore[arg-type]
        whole = _ask_with_scorer(tmp_path, base_url, 2, tmp_path / "whole")
        uninterrupted = [request["prompt"] for request in server.requests]
        server.requests.clear()
        with pytest.raises(RecordingExhaustedError):
            _ask_with_scorer(tmp_path, base_url, 0, tmp_path / "state")
        before_crash = [request["prompt"] for request in server.requests]
        server.requests.clear()
        resumed = _ask_with_scorer(tmp_path, base_url, 2, tmp_path / "state")
        after_resume = [request["prompt"] for request in server.requests]

    assert before_crash and after_resume  # the profile unit scored before the crash, the plan unit after it
    assert uninterrupted == before_crash + after_resume
    assert not set(after_resume) & set(before_crash)
    assert resumed.plan_json == whole.plan_json and resumed.datasets == whole.datasets
    (folder,) = (tmp_path / "state" / ASKS_FOLDER).iterdir()
    assert folder.name == resumed.ask_id
    scores = [record for record in read_ask_trace(folder) if isinstance(record, ScoreJournaled)]
    paid = [score for score in scores if not score.replayed]
    replayed = [score for score in scores if score.replayed]
    assert len(paid) == len(uninterrupted) and len(replayed) == len(before_crash)
    assert {score.unit_name for score in replayed} == {"profile"}
    assert all(score.prompt_tokens > 0 for score in paid) and all(score.prompt_tokens == 0 for score in replayed)
    assert {score.text for score in replayed} <= {score.text for score in paid if score.attempt == 1}
    assert f"scorer: {len(paid)} call(s)" in render_ask_trace(folder)


# -- `semray models check` reports the scorer tier ---------------------------------------------------------------


def _profile(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "semray.toml"
    path.write_text(
        f'[scorer]\nbackend = "openai"\nmodel = "scorer"\nbase_url = "{base_url}"\napi_key_env = "SCORER_KEY"\n'
        "max_retries = 0\ntimeout_s = 5\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("mode", "status"),
    [
        ("ok", r"^ok \(scores text: 2 token logprob\(s\) for ' reviews'\)$"),
        ("no_logprobs", r"^FAILED: the endpoint answers but cannot score: .*logprobs is missing"),
        ("no_echo", r"^FAILED: the endpoint answers but cannot score: .*not echoed"),
        ("chat_only", r"^FAILED: .*HTTP 404.*prompt scoring needs the legacy /v1/completions"),
    ],
)
def test_models_check_scores_a_probe_on_the_scorer_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, status: str
) -> None:
    from semray.planner.agents.scorer_tier import check_scorer

    monkeypatch.setenv("SCORER_KEY", KEY)
    server = LogprobServer(rule, mode)
    with served(server) as base_url:  # type: ignore[arg-type]
        checked = check_scorer(Settings(), load_profile(_profile(tmp_path, base_url)))
    assert checked is not None
    assert (checked.tier, checked.backend, checked.model, checked.where) == ("scorer", "openai", "scorer", base_url)
    assert re.search(status, checked.status), checked.status
    assert checked.ok == (mode == "ok")
    assert checked.logprobs is {"ok": True, "chat_only": None}.get(mode, False)
    assert len(server.requests) == (0 if mode == "chat_only" else 1)
    assert check_scorer(Settings(), ServingConfig()) is None


def test_models_check_prints_the_scorer_row_and_fails_on_an_endpoint_that_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from semray.cli import main

    monkeypatch.setenv("SCORER_KEY", KEY)
    with served(LogprobServer(rule)) as base_url:  # type: ignore[arg-type]
        assert main(["--models", str(_profile(tmp_path, base_url)), "models", "check", "--tier", "scorer"]) == 0
    shown = capsys.readouterr().out
    assert "scorer" in shown and base_url in shown and "ok (scores text" in shown
    down = _profile(tmp_path, "http://127.0.0.1:9/v1")  # nothing listens on port 9
    assert main(["--models", str(down), "models", "check", "--tier", "scorer"]) == 2
    captured = capsys.readouterr()
    assert "FAILED" in captured.out and "127.0.0.1:9/v1/completions" in captured.out
    assert "tier(s) scorer did not answer" in captured.err
    assert KEY not in captured.out + captured.err
    monkeypatch.delenv("SCORER_KEY")
    assert main(["--models", str(tmp_path / "none.toml"), "models", "check", "--tier", "scorer"]) == 2
