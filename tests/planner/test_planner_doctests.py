"""The docstring examples of the planner modules run as tests (SKIP-marked ones need a plan)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import semray.planner

SUBMODULES = pkgutil.walk_packages(semray.planner.__path__, prefix="semray.planner.")
MODULES = ["semray.planner", *sorted(module.name for module in SUBMODULES)]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0
