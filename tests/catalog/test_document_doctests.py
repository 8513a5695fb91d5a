"""The examples in the docstrings of the catalog's document modules stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "semray.catalog.chunks",
    "semray.catalog.enumerations",
    "semray.catalog.headings",
    "semray.catalog.lines",
    "semray.catalog.section_proposals",
    "semray.catalog.segments",
    "semray.catalog.snippets",
    "semray.catalog.streamed_documents",
    "semray.catalog.ingest_progress",
    "semray.serving.prompts.sections",
    "semray.sources.document_encoding",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
