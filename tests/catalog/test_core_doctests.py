"""The examples in the docstrings of the catalog's core modules (servers, profiles, store) stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "semray.catalog.profiling",
    "semray.catalog.schema_inference",
    "semray.catalog.summaries",
    "semray.catalog.document_pipeline",
    "semray.catalog.servers",
    "semray.catalog.servers.base",
    "semray.catalog.servers.postgres",
    "semray.catalog.tables",
    "semray.catalog.catalogued_rows",
    "semray.operators.catalogued",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
