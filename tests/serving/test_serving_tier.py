"""The generic tier: input errors, truncation, cache, parsing with one repair, pricing (no Ray)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from serving_fakes import ScriptedBackend

from semray.serving.backends.simulated import SimulatedBackend
from semray.serving.cache import ResponseCache
from semray.serving.config import Prices, TierConfig
from semray.serving.contract import ModelRequest, ModelResponse, OutputConstraint
from semray.serving.simulator import SimulatorConfig
from semray.serving.tier import ModelTier
from semray.serving.truncation import Fitted, count_tokens, fit_prompt, token_ceiling

YES_NO = OutputConstraint.choice("Yes", "No")
SCRIPTED = TierConfig(backend="simulated", model="scripted")


def run(tier: ModelTier, requests: list[ModelRequest]) -> list[ModelResponse]:
    return asyncio.run(tier.generate(requests))


def test_parsed_answers_are_priced_and_tagged() -> None:
    tier = ModelTier("small", SCRIPTED, ScriptedBackend(lambda call: "yes"))
    (response,) = run(tier, [ModelRequest(prompt="Is it?", constraint=YES_NO, request_id="r1")])
    assert (response.value, response.error, response.request_id, response.tier) == ("Yes", None, "r1", "small")
    assert response.usage.input_tokens == 10 and response.usage.output_tokens == 2
    assert response.usage.dollars == (10 * 1.0 + 2 * 2.0) / 1e6
    assert response.confidence is not None and 0.9 < response.confidence < 1.0


def test_one_repair_call_then_a_typed_error() -> None:
    replies = iter(["Perhaps", "No"])
    backend = ScriptedBackend(lambda call: next(replies))
    (fixed,) = run(ModelTier("small", SCRIPTED, backend), [ModelRequest(prompt="Is it?", constraint=YES_NO)])
    assert fixed.value == "No" and fixed.repaired and fixed.calls == 2
    assert fixed.usage.input_tokens == 20, "both calls are charged"
    assert "Perhaps" in backend.calls[1].messages[-1][1], "the repair re-ask quotes the bad reply"

    stubborn = ScriptedBackend(lambda call: "Perhaps")
    (failed,) = run(ModelTier("small", SCRIPTED, stubborn), [ModelRequest(prompt="Is it?", constraint=YES_NO)])
    assert failed.value is None and failed.error_code == "unparseable" and len(stubborn.calls) == 2


def test_empty_and_flagged_inputs_are_answered_without_a_call() -> None:
    backend = ScriptedBackend(lambda call: "Yes")
    requests = [
        ModelRequest(prompt="  ", constraint=YES_NO, request_id="a"),
        ModelRequest(prompt="x", input_error="empty_input: column 'review' is null", request_id="b"),
        ModelRequest.model_validate({"prompt": 7, "request_id": "c"}),
        ModelRequest(prompt="fine", constraint=YES_NO, request_id="d"),
    ]
    responses = run(ModelTier("small", SCRIPTED, backend), requests)
    assert [r.error_code for r in responses] == ["empty_input", "empty_input", "non_string_input", None]
    assert [r.request_id for r in responses] == ["a", "b", "c", "d"]
    assert len(backend.calls) == 1 and all(r.calls == 0 for r in responses[:3])


def test_over_long_prompts_follow_the_truncation_policy() -> None:
    long_prompt = "Is it good? " + " ".join(f"word{i}" for i in range(400))
    for policy, expect_error in (("error", True), ("middle", False), ("head", False)):
        backend = ScriptedBackend(lambda call: "Yes", context_length=300)
        config = SCRIPTED.model_copy(update={"truncation": policy})
        (response,) = run(ModelTier("small", config, backend), [ModelRequest(prompt=long_prompt, constraint=YES_NO)])
        assert (response.error_code == "prompt_too_long") is expect_error, policy
        assert response.truncated is (not expect_error)
        if not expect_error:
            sent = backend.calls[0].messages[-1][1]
            assert sent.startswith("Is it good?") and len(sent) < len(long_prompt)


def test_duplicates_in_a_batch_are_answered_once(tmp_path: Path) -> None:
    backend = ScriptedBackend(lambda call: "Yes")
    tier = ModelTier("small", SCRIPTED, backend, ResponseCache(tmp_path / "c.sqlite"))
    responses = run(tier, [ModelRequest(prompt="same", constraint=YES_NO, request_id=str(i)) for i in range(3)])
    assert len(backend.calls) == 1
    assert [r.cache_hit for r in responses] == [False, True, True]
    assert [r.request_id for r in responses] == ["0", "1", "2"]


def test_cache_hits_cost_nothing_and_keys_cover_decoding_params(tmp_path: Path) -> None:
    backend = ScriptedBackend(lambda call: "Yes")
    tier = ModelTier("small", SCRIPTED, backend, ResponseCache(tmp_path / "c.sqlite"))
    run(tier, [ModelRequest(prompt="q", constraint=YES_NO)])
    (hit,) = run(tier, [ModelRequest(prompt="q", constraint=YES_NO, request_id="again")])
    assert hit.cache_hit and hit.usage.input_tokens == 0 and hit.usage.dollars == 0 and hit.calls == 0
    assert hit.request_id == "again" and hit.value == "Yes"
    (miss,) = run(tier, [ModelRequest(prompt="q", constraint=YES_NO, temperature=0.7)])
    assert not miss.cache_hit and len(backend.calls) == 2
    other_model = ModelTier("small", SCRIPTED.model_copy(update={"model": "other"}), backend, tier.cache)
    (miss,) = run(other_model, [ModelRequest(prompt="q", constraint=YES_NO)])
    assert not miss.cache_hit


def test_errors_are_not_cached(tmp_path: Path) -> None:
    backend = ScriptedBackend(lambda call: "Perhaps")
    tier = ModelTier("small", SCRIPTED, backend, ResponseCache(tmp_path / "c.sqlite"))
    run(tier, [ModelRequest(prompt="q", constraint=YES_NO)])
    run(tier, [ModelRequest(prompt="q", constraint=YES_NO)])
    assert len(backend.calls) == 4 and tier.cache is not None and len(tier.cache) == 0


def test_configured_prices_override_the_backend_ones() -> None:
    config = SCRIPTED.model_copy(update={"prices": Prices(input_per_million=10.0)})
    (response,) = run(ModelTier("small", config, ScriptedBackend(lambda call: "Yes")), [ModelRequest(prompt="q")])
    assert response.usage.dollars == 10 * 10.0 / 1e6


def _simulated_tier(context_length: int = 4096) -> tuple[ModelTier, pa.Table]:
    texts = [
        "the battery died after two days and support never answered my emails at all",
        "wonderful screen and a camera that takes lovely pictures in the evening light",
    ]
    table = pa.table({"id": ["a", "b"], "review": texts, "good": [False, True]})
    from semray.serving.simulator import ModelProfile, TaskSpec

    config = SimulatorConfig.from_labels(
        table,
        key_column="id",
        text_columns=["review"],
        tasks=[TaskSpec(name="good", kind="filter", label_column="good", keywords=("positive",))],
        models={"sim-large": ModelProfile(error_rate=0.0, context_length=context_length, price_in_per_million=2.0)},
    )
    tier_config = TierConfig(backend="simulated", model="sim-large")
    return ModelTier("large", tier_config, SimulatedBackend(tier_config, config)), table


def test_simulated_backend_answers_from_labels_with_prices_and_logprobs() -> None:
    tier, table = _simulated_tier()
    requests = [
        ModelRequest(prompt=f"Is this review positive? Answer yes or no.\n\n{text}", constraint=YES_NO, request_id=key)
        for key, text in zip(table["id"].to_pylist(), table["review"].to_pylist(), strict=True)
    ]
    responses = run(tier, requests)
    assert [r.value for r in responses] == ["No", "Yes"]
    assert all(r.token_logprobs and r.confidence is not None for r in responses)
    assert all(r.usage.dollars == r.usage.input_tokens * 2.0 / 1e6 for r in responses)


def test_simulated_context_limit_is_a_row_error_or_a_truncation() -> None:
    tier, _ = _simulated_tier(context_length=64)
    prompt = "Is this review positive? " + "very " * 200
    (cut,) = run(tier, [ModelRequest(prompt=prompt, constraint=YES_NO, max_tokens=8)])
    # Cut to fit, then sent: the text quotes no labelled row, so the simulator answers no_label.
    assert cut.truncated and cut.error_code == "no_label"
    strict = ModelTier("large", tier.config.model_copy(update={"truncation": "error"}), tier.backend)
    (refused,) = run(strict, [ModelRequest(prompt=prompt, constraint=YES_NO, max_tokens=8)])
    assert refused.error_code == "prompt_too_long" and refused.value is None


def test_simulated_unknown_model_is_a_clear_error() -> None:
    import pytest

    from semray.serving.errors import UnknownModelError

    with pytest.raises(UnknownModelError, match=r"sim-huge.*sim-small"):
        SimulatedBackend(TierConfig(backend="simulated", model="sim-huge"), SimulatorConfig())


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=300))
def test_a_prompt_never_has_more_tokens_than_its_ceiling(text: str) -> None:
    # fit_prompt skips counting a prompt whose token ceiling fits its budget.
    assert count_tokens(text) <= token_ceiling(text)


@pytest.mark.parametrize("text", ["퓨", "한국어 문장입니다", "İstanbul", "\u1f82", "ǅ", "ﬃ", "x퓨y" * 50])
def test_characters_that_decompose_stay_under_the_ceiling(text: str) -> None:
    """Hangul syllables are two or three tokens each (found by the property test: '퓨' is 2)."""
    assert count_tokens(text) <= token_ceiling(text)


def test_a_hangul_prompt_within_its_length_but_over_its_tokens_is_still_cut() -> None:
    prompt = "퓨퓨퓨 " * 20  # 80 characters, 120 tokens (a longer word would be one [UNK])
    assert count_tokens(prompt) > 100 >= len(prompt)
    fitted = fit_prompt(prompt, [], max_tokens=10, context_length=120, policy="error")
    assert fitted.error is not None and "prompt_too_long" in fitted.error


def test_short_prompts_are_sent_uncounted_and_long_ones_still_cut() -> None:
    assert fit_prompt("short", [], max_tokens=10, context_length=100, policy="error") == Fitted("short")
    assert fit_prompt("word " * 200, [], max_tokens=10, context_length=100, policy="error").error is not None
