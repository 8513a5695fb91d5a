"""The examples in the sources package's docstrings stay true."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import semray.sources

MODULES = sorted(info.name for info in pkgutil.iter_modules(semray.sources.__path__, "semray.sources."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
