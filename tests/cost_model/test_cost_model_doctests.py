"""The docstring examples of the cost-model statistics run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ("semray.cost_model.sampling", "semray.cost_model.thresholds")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
