"""The docstring examples of the cost-model statistics run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = (
    "semray.cost_model.sampling",
    "semray.cost_model.thresholds",
    "semray.cost_model.estimates",
    "semray.cost_model.statistics",
    "semray.cost_model.prices",
    "semray.cost_model.tokens",
    "semray.cost_model.plan_cost",
    "semray.cost_model.quality",
    "semray.cost_model.policies",
    "semray.cost_model.measure",
    "semray.cost_model.relational",
    "semray.cost_model.cardinality",
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
