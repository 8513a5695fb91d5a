"""The docstring examples of the serving modules run as tests (examples that need Ray or a model are skipped)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = (
    "semray.serving",
    "semray.serving.contract",
    "semray.serving.config",
    "semray.serving.parsing",
    "semray.serving.cache",
    "semray.serving.errors",
    "semray.serving.identity",
    "semray.serving.validation",
    "semray.serving.usage",
    "semray.serving.tier",
    "semray.serving.truncation",
    "semray.serving.deployments",
    "semray.serving.lifecycle",
    "semray.serving.prompts.formats",
    "semray.serving.prompts.render",
    "semray.serving.backends.embedder",
    "semray.serving.backends.simulated",
    "semray.serving.backends.openai",
    "semray.serving.backends.hf",
    "semray.serving.backends.vllm",
    "semray.serving.placement",
    "semray.serving.prompt_logprobs",
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
