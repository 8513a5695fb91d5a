"""The hf backend on a tiny randomly initialised GPT-2 that the test builds and saves itself."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from semray.serving.backends.base import Call
from semray.serving.config import TierConfig
from semray.serving.contract import ModelRequest, OutputConstraint
from semray.serving.errors import ServingConfigError

WORDS = ("the", "a", "is", "it", "good", "bad", "yes", "no", "review", "phone", "battery", "screen", "answer")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-gpt2")
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[EOS]", *WORDS, "?", ".", ":"])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(vocab), n_positions=64, n_embd=16, n_layer=1, n_head=2, eos_token_id=2, pad_token_id=0
    )
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def _backend(path: Path, **overrides: object):  # type: ignore[no-untyped-def]
    from semray.serving.backends.hf import HFBackend

    return HFBackend(TierConfig(backend="hf", model="tiny", model_path=path, **overrides))  # type: ignore[arg-type]


def _call(text: str, max_tokens: int = 6) -> Call:
    return Call((("user", text),), max_tokens=max_tokens, temperature=0.0, logprobs=True)


def test_batched_generation_with_logprobs(tiny_model: Path) -> None:
    backend = _backend(tiny_model, batch_size=4)
    calls = [_call("is the review good ?"), _call("battery", max_tokens=3), _call("is it a good phone screen ?")]
    batched = asyncio.run(backend.complete(calls))
    assert backend.context_length == 64
    for call, result in zip(calls, batched, strict=True):
        assert 0 < result.output_tokens <= call.max_tokens and len(result.token_logprobs) == result.output_tokens
        assert all(lp <= 0.0 for lp in result.token_logprobs) and result.input_tokens > 0
    singles = [asyncio.run(backend.complete([call]))[0] for call in calls]
    assert [r.text for r in singles] == [r.text for r in batched], "left padding does not change greedy answers"
    for single, batch in zip(singles, batched, strict=True):
        assert all(
            math.isclose(a, b, abs_tol=1e-4) for a, b in zip(single.token_logprobs, batch.token_logprobs, strict=True)
        )


def test_hf_tier_returns_typed_errors_for_a_model_that_cannot_follow_formats(tiny_model: Path) -> None:
    from semray.serving.tier import ModelTier

    config = TierConfig(backend="hf", model="tiny", model_path=tiny_model)
    tier = ModelTier("small", config, _backend(tiny_model))
    choice, text = asyncio.run(
        tier.generate(
            [
                ModelRequest(prompt="is it good ?", constraint=OutputConstraint.choice("yes", "no"), max_tokens=4),
                ModelRequest(prompt="is it good ?", max_tokens=4),
            ]
        )
    )
    assert choice.calls == 2 and (choice.error is None) == (choice.value in ("yes", "no"))
    # A random model rarely stops within 4 tokens: a reply cut at max_tokens is a `truncated`
    # row error (after the one re-ask), never a silently valid answer.
    if text.error is None:
        assert text.confidence is not None and 0 < text.confidence <= 1
    else:
        assert text.error_code == "truncated" and text.value is None and text.confidence is None


def test_missing_model_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ServingConfigError, match="does not exist"):
        _backend(tmp_path / "nope")
